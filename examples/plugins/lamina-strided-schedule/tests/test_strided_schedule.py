"""The strided schedule: chosen only by name, correct on the simulator, compiling cleanly for sm_90."""

import pytest
import torch

import lamina
from lamina.backends.cuda.codegen import emit_cuda, kernel_symbol
from lamina.backends.cuda.nvrtc import compile_kernel
from lamina.cli.main import main
from lamina.core.config import load_config
from lamina.core.errors import ScheduleError
from lamina.core.plugins import PluginManager, reset_plugin_managers


@pytest.fixture(autouse=True)
def fresh_plugins(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    for var in ("LAMINA_SCHEDULE", "LAMINA_PLUGINS", "LAMINA_DISABLE_PLUGINS"):
        monkeypatch.delenv(var, raising=False)
    reset_plugin_managers()
    yield
    reset_plugin_managers()


def pointwise(x, y):
    return torch.relu(x + y) * 2.0 - torch.sigmoid(y)


def schedules(compiled):
    return [tile.schedule for tile in compiled.compilation.tiles]


def test_the_plugin_is_installed_with_a_low_priority():
    manager = PluginManager(load_config(environ={}))
    entry = manager.registry.get("schedule", "strided")
    assert entry is not None and entry.plugin == "strided_schedule"
    assert entry.priority < manager.registry.get("schedule", "generic").priority


def test_it_is_never_chosen_unless_configured():
    x, y = torch.randn(37, 29), torch.randn(29)
    assert "strided" not in schedules(lamina.compile(pointwise, (x, y)))


def test_the_config_file_names_it(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.lamina]\nschedule = "strided"\n')
    x, y = torch.randn(37, 29), torch.randn(29)
    compiled = lamina.compile(pointwise, (x, y))
    assert schedules(compiled) == ["strided"]
    torch.testing.assert_close(compiled(x, y), pointwise(x, y))


def test_the_environment_names_it(monkeypatch):
    monkeypatch.setenv("LAMINA_SCHEDULE", "strided")
    x, y = torch.randn(3, 300), torch.randn(300)
    assert schedules(lamina.compile(pointwise, (x, y))) == ["strided"]


def test_kernels_it_does_not_handle_fall_back_to_lamina_schedules():
    def program(x, w):
        return x @ w, x * 2.0

    x, w = torch.randn(9, 20), torch.randn(20, 11)
    compiled = lamina.compile(program, (x, w), schedule="strided")
    assert sorted(schedules(compiled)) == ["contraction", "strided"]
    torch.testing.assert_close(compiled(x, w), program(x, w))


def test_lamina_compile_shows_it_at_the_tile_level(capsys):
    code = main(["compile", "-c", "torch.relu(x + y)", "--input", "x=33,17", "--input", "y=17",
                 "--schedule", "strided", "--ir", "tile"])
    out = capsys.readouterr().out
    assert code == 0
    assert "schedule=strided" in out
    assert "x 4 per thread (strided by" in out


KNOBS = [{}, {"per_thread": 3}, {"threads": 32, "per_thread": 1}, {"threads": 64, "per_thread": 8}]
RAGGED = [
    ((1,), {}), ((7,), {"per_thread": 3}), ((31, 5), {}), ((129,), {"threads": 32, "per_thread": 1}),
    ((3, 5, 67), {"threads": 64, "per_thread": 8}), ((513, 3), {}), ((64, 8), {"threads": 64, "per_thread": 8}),
]


@pytest.mark.parametrize("shape, knobs", RAGGED, ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_ragged_shapes_match_pytorch_on_the_simulator(shape, knobs):
    x, y = torch.randn(*shape), torch.randn(shape[-1])
    compiled = lamina.compile(pointwise, (x, y), schedule="strided", knobs={"strided": knobs})
    assert schedules(compiled) == ["strided"]
    torch.testing.assert_close(compiled(x, y), pointwise(x, y))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64, torch.int32])
def test_other_dtypes(dtype):
    x = (torch.randn(45, 19) * 10).to(dtype)
    compiled = lamina.compile(lambda x: x * 3 + x, (x,), schedule="strided")
    torch.testing.assert_close(compiled(x), x * 3 + x)


@pytest.mark.parametrize("knobs", KNOBS, ids=lambda k: ",".join(f"{n}={v}" for n, v in k.items()) or "default")
def test_kernels_compile_for_sm_90_without_spills(knobs):
    x, y = torch.randn(100, 33), torch.randn(33)
    compiled = lamina.compile(pointwise, (x, y), schedule="strided", knobs={"strided": knobs}, target="sm_90")
    for kernel in compiled.compilation.kernels.kernels:
        result = compile_kernel(emit_cuda(kernel), kernel_symbol(kernel), "sm_90")
        assert result.registers > 0
        assert (result.spill_stores, result.spill_loads) == (0, 0)


@pytest.mark.parametrize("knobs, message", [
    ({"per_thread": 0}, "per_thread = 0 is not usable by the strided schedule: it must be a whole number from 1 to 16"),
    ({"threads": 48}, "threads = 48 is not usable by the strided schedule: it must be a whole number from 32 to 1024, a multiple of 32"),
])
def test_unusable_knobs_are_explained(knobs, message):
    with pytest.raises(ScheduleError, match=message.replace("(", r"\(")):
        lamina.compile(lambda x: x + 1.0, (torch.randn(40),), schedule="strided", knobs={"strided": knobs})

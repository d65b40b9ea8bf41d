"""The example plugin packages, installed next to lamina: what they add, and that they change nothing else."""

import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.cli.main import main
from lamina.core.config import load_config
from lamina.core.errors import UnsupportedOpError
from lamina.core.plugins import PluginManager
from lamina.frontends.torch.capture import DEFAULT_KEEP

from tests.plugins_ecosystem import example_packages


def test_each_package_declares_one_entry_point_that_loads(examples):
    manager = PluginManager(load_config(environ={}))
    infos = {p.name: p for p in manager.plugins}
    for package in example_packages.PACKAGES:
        (name,) = example_packages.entry_points(package)
        assert infos[name].status == "loaded", infos[name].error
        assert infos[name].distribution == package


def test_a_program_that_was_unsupported_compiles_with_the_op_plugin(examples):
    import lamina_extra_ops

    x = torch.randn(11, 23) * 5
    keep = DEFAULT_KEEP + lamina_extra_ops.KEEP
    with pytest.raises(UnsupportedOpError, match="aten.mish.default"):
        lamina.compile(F.mish, (x,), keep=keep, disable=("extra_ops",))
    compiled = lamina.compile(F.mish, (x,), keep=keep)
    torch.testing.assert_close(compiled(x), F.mish(x))


def test_the_schedule_plugin_is_used_only_when_named(examples, capsys):
    x, y = torch.randn(19, 45), torch.randn(45)
    default = lamina.compile(lambda x, y: x * y + 1.0, (x, y))
    named = lamina.compile(lambda x, y: x * y + 1.0, (x, y), schedule="strided")
    assert [t.schedule for t in default.compilation.tiles] == ["pointwise"]
    assert [t.schedule for t in named.compilation.tiles] == ["strided"]
    torch.testing.assert_close(named(x, y), x * y + 1.0)
    assert main(["compile", "-c", "x * 2.0", "--input", "x=5,67", "--schedule", "strided", "--ir", "tile"]) == 0
    assert "schedule=strided" in capsys.readouterr().out


PROGRAMS = {
    "running_example": (lambda x, b, w: torch.relu((x + b) @ w), [(17, 65), (65,), (65, 19)]),
    "elementwise": (lambda x, y: torch.exp(-(x - y) ** 2) * torch.sigmoid(y), [(4, 33), (33,)]),
}


@pytest.mark.parametrize("name", PROGRAMS)
def test_installing_the_examples_changes_no_compile_of_lamina_own_ops(name, examples):
    program, shapes = PROGRAMS[name]
    inputs = [torch.randn(*s) for s in shapes]
    with_examples = lamina.compile(program, inputs)
    without = lamina.compile(program, inputs, disable=("extra_ops", "strided_schedule"))
    for level in ("tensor", "loop", "tile", "kernel"):
        assert with_examples.ir(level) == without.ir(level), level

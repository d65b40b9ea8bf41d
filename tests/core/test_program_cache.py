"""The program cache: a compile that an earlier one left in the cache skips the pipeline."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import lamina
from lamina.core import cache_usage, program_cache
from lamina.core.hookspecs import hookimpl
from lamina.core.ir import torch_ir
from lamina.core.pipeline import LEVELS

LOADED = "loading from the program cache"


def mlp(x, w1, w2, bias):
    return torch.relu(x @ w1 + bias) @ w2


def inputs(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(13, 40, generator=generator), torch.randn(40, 24, generator=generator),
            torch.randn(24, 7, generator=generator), torch.randn(24, generator=generator))


def compiled(tmp_path, **settings):
    x, w1, w2, bias = inputs()
    return lamina.compile(mlp, (x, w1, w2, bias), program_cache=True, cache_dir=str(tmp_path), **settings)


def entries(tmp_path):
    cache_usage.finish_writes()  # a compile stores its program from a thread of its own
    return sorted((tmp_path / "programs").glob("*.pickle"))


def test_a_second_compile_of_the_same_program_loads_it_and_computes_the_same(tmp_path):
    first = compiled(tmp_path)
    assert LOADED not in first.compilation.timings.stages and len(entries(tmp_path)) == 1
    second = compiled(tmp_path)
    assert list(second.compilation.timings.stages) == ["capture", LOADED]
    for level in LEVELS[:-1]:
        assert second.ir(level) == first.ir(level)
    for seed in (1, 2):
        args = inputs(seed)
        torch.testing.assert_close(second(*args), mlp(*args), rtol=1e-5, atol=1e-5)


def test_other_settings_or_shapes_compile_again(tmp_path):
    compiled(tmp_path)
    pinned = compiled(tmp_path, schedule="generic")
    assert LOADED not in pinned.compilation.timings.stages
    x, w1, w2, bias = inputs()
    other = lamina.compile(mlp, (x[:5], w1, w2, bias), program_cache=True, cache_dir=str(tmp_path))
    assert LOADED not in other.compilation.timings.stages
    assert len(entries(tmp_path)) == 3


def test_without_the_program_cache_nothing_is_stored(tmp_path):
    x, w1, w2, bias = inputs()
    lamina.compile(mlp, (x, w1, w2, bias), program_cache=False, cache_dir=str(tmp_path))
    assert entries(tmp_path) == []


@pytest.mark.parametrize("damage", ["truncated", "overwritten"])
def test_a_damaged_entry_is_compiled_again_and_rewritten_with_a_warning(tmp_path, damage):
    compiled(tmp_path)
    (entry,) = entries(tmp_path)
    data = entry.read_bytes()
    entry.write_bytes(data[:len(data) // 2] if damage == "truncated" else data[:-10] + b"0123456789")
    with pytest.warns(UserWarning, match="program cache entry .* is damaged"):
        again = compiled(tmp_path)
    assert LOADED not in again.compilation.timings.stages
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert LOADED in compiled(tmp_path).compilation.timings.stages


class LevelWatcher:
    def __init__(self):
        self.levels = []

    @hookimpl
    def lamina_observe_ir(self, level, ir, compilation):
        self.levels.append(level)


def test_observers_see_every_level_of_a_loaded_program(tmp_path):
    """A plugin registered by hand counts in the key like any other (its module's code)."""
    watcher = LevelWatcher()
    manager = lamina.Compiler().plugins.pm
    manager.register(watcher)
    try:
        compiled(tmp_path)
        watcher.levels.clear()
        assert LOADED in compiled(tmp_path).compilation.timings.stages
    finally:
        manager.unregister(watcher)
    assert watcher.levels == list(LEVELS)
    assert LOADED not in compiled(tmp_path).compilation.timings.stages  # another set of plugins


def test_a_graph_that_holds_a_tensor_has_no_key():
    node = torch_ir.Node(name="add", target="aten.add.Tensor", args=(torch_ir.Ref("x"), torch.ones(3)))
    graph = torch_ir.Graph(inputs=(), nodes=(node,), outputs=("add",))
    assert program_cache.program_key(graph, "sm_90", "settings", "code") is None
    plain = torch_ir.Graph(inputs=(), nodes=(node.__class__(name="add", target="aten.add.Tensor",
                                                             args=(torch_ir.Ref("x"), 1.5)),), outputs=("add",))
    assert program_cache.program_key(plain, "sm_90", "settings", "code") is not None


def test_an_edited_plugin_changes_the_code_digest(tmp_path):
    package = tmp_path / "edited_plugin"
    package.mkdir()
    (package / "__init__.py").write_text("PRIORITY = 1\n")
    before = program_cache._package_digest.__wrapped__(package)
    (package / "__init__.py").write_text("PRIORITY = 2\n")
    assert program_cache._package_digest.__wrapped__(package) != before


def test_a_program_of_sizes_known_at_run_time_is_kept_per_hint(tmp_path):
    """The cost model weighs such a program's settings at the example's sizes: another example
    compiles again, the same one loads it."""
    seq = torch.export.Dim("seq", min=2, max=4096)
    w1, w2, bias = inputs()[1:]

    def compile_at(rows):
        x = torch.randn(rows, 40)
        return lamina.compile(mlp, (x, w1, w2, bias), dynamic_shapes=({0: seq}, None, None, None),
                              program_cache=True, cache_dir=str(tmp_path))

    assert LOADED not in compile_at(13).compilation.timings.stages
    assert LOADED not in compile_at(300).compilation.timings.stages
    assert LOADED in compile_at(13).compilation.timings.stages
    assert len(entries(tmp_path)) == 2


def key_of(tmp_path, program=mlp, args=None, **settings) -> str:
    args = inputs() if args is None else args
    return lamina.compile(program, args, program_cache=True, cache_dir=str(tmp_path), **settings).compilation.key


KEY_PARTS = {
    "the graph": lambda tmp_path, monkeypatch: key_of(tmp_path, lambda x, w1, w2, bias: torch.tanh(x @ w1 + bias) @ w2),
    "the input shapes": lambda tmp_path, monkeypatch: key_of(tmp_path, args=(inputs()[0][:5], *inputs()[1:])),
    "the input dtypes": lambda tmp_path, monkeypatch: key_of(tmp_path, args=tuple(a.to(torch.bfloat16) for a in inputs())),
    "the configuration": lambda tmp_path, monkeypatch: key_of(tmp_path, schedule="generic"),
    "the target": lambda tmp_path, monkeypatch: key_of(tmp_path, target="sm_80"),
    "lamina's code": lambda tmp_path, monkeypatch: (
        monkeypatch.setattr(program_cache, "_package_digest", lambda folder: "another version"), key_of(tmp_path))[1],
    "PyTorch's version": lambda tmp_path, monkeypatch: (
        monkeypatch.setattr(torch, "__version__", "0.0.1"), key_of(tmp_path))[1],
}


@pytest.mark.parametrize("part", KEY_PARTS)
def test_the_key_changes_with_each_of_its_parts(tmp_path, monkeypatch, part):
    same = key_of(tmp_path)
    assert same is not None and key_of(tmp_path) == same
    assert KEY_PARTS[part](tmp_path, monkeypatch) not in (None, same)


def test_the_key_changes_with_the_plugins_loaded_and_their_code(site):
    from lamina.core.plugins import reset_plugin_managers
    from tests.core.plugin_distributions import fusion_rule_plugin, install_plugin

    without = key_of(site)
    install_plugin(site, "lamina-idle-rule", "idle_rule", "lamina_test_plugin_idle_rule", fusion_rule_plugin("idle"))
    reset_plugin_managers()
    with_plugin = key_of(site)
    (site / "lamina_test_plugin_idle_rule.py").write_text((site / "lamina_test_plugin_idle_rule.py").read_text()
                                                          + "\n# version 2\n")
    program_cache._package_digest.cache_clear()
    reset_plugin_managers()
    assert len({without, with_plugin, key_of(site)}) == 3


RACER = textwrap.dedent("""
    import json, sys, torch, lamina

    def mlp(x, w1, w2, bias):
        return torch.relu(x @ w1 + bias) @ w2

    g = torch.Generator().manual_seed(0)
    args = (torch.randn(13, 40, generator=g), torch.randn(40, 24, generator=g), torch.randn(24, 7, generator=g),
            torch.randn(24, generator=g))
    compiled = lamina.compile(mlp, args, program_cache=True, cache_dir=sys.argv[1])
    torch.testing.assert_close(compiled(*args), mlp(*args), rtol=1e-5, atol=1e-5)
    print(json.dumps(list(compiled.compilation.timings.stages)))
""")


def test_two_processes_compiling_into_one_empty_cache_both_succeed(tmp_path):
    """Each writes its entry atomically; neither reads half of the other's, and a third loads it."""
    def start():
        return subprocess.Popen([sys.executable, "-c", RACER, str(tmp_path)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    racers = [start(), start()]
    for racer in racers:
        out, err = racer.communicate(timeout=600)
        assert racer.returncode == 0, err
        assert "damaged" not in err
    out, err = start().communicate(timeout=600)
    stages = json.loads(out.strip().splitlines()[-1])
    assert stages[:2] == ["capture", LOADED] and "fusion" not in stages
    assert len(entries(tmp_path)) == 1


def test_a_compile_right_after_the_first_waits_for_its_entry(tmp_path):
    """The first compile stores its program from a thread of its own; a reader of the same entry in
    this process waits for that write rather than compiling again."""
    compiled(tmp_path)
    second = compiled(tmp_path)
    assert list(second.compilation.timings.stages) == ["capture", LOADED]

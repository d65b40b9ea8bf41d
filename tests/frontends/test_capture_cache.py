"""The capture cache: a module compiled again for the same call, in this process or another,
skips ``torch.export`` and the pipeline, and reads its state at each call as ever."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap

import pytest
import torch

import lamina
from lamina.api import LOADED_CAPTURE
from lamina.frontends.torch import capture_cache
from lamina.models.architectures import architecture, build, example_inputs

LOADED_PROGRAM = "loading from the program cache"


class Scaled(torch.nn.Module):
    def __init__(self, features: int = 8, eps: float = 1e-6):
        super().__init__()
        self.proj = torch.nn.Linear(features, features)
        self.eps = eps

    def forward(self, x):
        return self.proj(x) * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


def key(module, *inputs, dynamic_shapes=None, keep=("aten.linear.default",), code="code"):
    return capture_cache.call_key(module, inputs, None, dynamic_shapes, keep, code)


def test_a_second_compile_of_a_module_loads_its_capture_and_its_program(tmp_path):
    module, x = Scaled(), torch.randn(5, 8)
    first = lamina.compile(module, (x,), program_cache=True, cache_dir=str(tmp_path))
    assert "capture" in first.compilation.timings.stages
    second = lamina.compile(module, (x,), program_cache=True, cache_dir=str(tmp_path))
    assert list(second.compilation.timings.stages) == [LOADED_CAPTURE, LOADED_PROGRAM]
    with torch.no_grad():
        module.proj.weight.mul_(2)  # state is read at each call, not kept with the capture
        torch.testing.assert_close(second(x), module(x))


WARM_START = textwrap.dedent("""
    import json, sys, torch, lamina
    from lamina.models.architectures import architecture, build, example_inputs
    arch = architecture("llama")
    model = build(arch, size="small")
    inputs = example_inputs(arch, model, length=13)
    compiled = lamina.compile(model, example_kwargs=inputs, program_cache=True, cache_dir=sys.argv[1])
    stages = list(compiled.compilation.timings.stages)
    with torch.no_grad():
        torch.testing.assert_close(compiled(**inputs).logits, model(**inputs).logits, rtol=1e-4, atol=1e-4)
    print(json.dumps(stages))
""")


def test_a_new_process_starts_a_language_model_without_running_a_stage(tmp_path):
    """A warm start in a new process: no export, no pipeline stage, the kernels' results eager's."""
    def stages() -> list[str]:
        done = subprocess.run([sys.executable, "-c", WARM_START, str(tmp_path)], capture_output=True, text=True,
                              check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])

    assert "capture" in stages()
    assert stages() == [LOADED_CAPTURE, LOADED_PROGRAM]


def test_the_key_changes_with_each_part_of_what_the_export_reads():
    module, x = Scaled(), torch.randn(5, 8)
    base = key(module, x)
    assert base == key(module, x) and base is not None
    assert key(Scaled(eps=1e-5), x) != base  # a plain attribute
    assert key(Scaled(features=8), torch.randn(6, 8)) != base  # the call's shapes
    assert key(module, x.double()) != base  # its dtypes
    wider = Scaled()
    wider.proj = torch.nn.Linear(8, 8, bias=False)
    assert key(wider, x) != base  # a parameter gone
    assert key(module, x, dynamic_shapes=({0: torch.export.Dim("rows", max=64)},)) != base
    assert key(module, x, dynamic_shapes=({0: torch.export.Dim("rows", max=128)},)) != \
        key(module, x, dynamic_shapes=({0: torch.export.Dim("rows", max=64)},))
    assert key(module, x, keep=()) != base  # the ops kept whole
    assert key(module, x, code="other") != base  # lamina's or a plugin's code
    with torch.no_grad():
        assert key(module, x) != base  # the grad mode
    module.proj.weight.data.add_(1)
    assert key(module, x) == base  # values are read at each call, not keyed


def test_an_edited_class_changes_the_key(tmp_path, monkeypatch):
    source = tmp_path / "edited_module.py"
    body = "import torch\nclass M(torch.nn.Module):\n    def forward(self, x):\n        return x * {}\n"
    source.write_text(body.format(2))
    monkeypatch.syspath_prepend(str(tmp_path))
    import edited_module

    before = key(edited_module.M(), torch.randn(3))
    source.write_text(body.format(3) + "# longer\n")
    importlib.reload(edited_module)  # as a new process imports it
    assert key(edited_module.M(), torch.randn(3)) != before


def test_what_the_key_cannot_name_is_captured_every_time():
    module, x = Scaled(), torch.randn(5, 8)
    assert key(lambda x: x * 2, x) is None  # a function: its closure and globals are not keyed
    hooked = Scaled()
    hooked.register_forward_hook(lambda m, args, out: out * 2)
    assert key(hooked, x) is None
    odd = Scaled()
    odd.helper = object()
    assert key(odd, x) is None
    assert key(module, x) is not None


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_language_models_have_a_key(name):
    arch = architecture(name)
    model = build(arch, size="small")
    assert capture_cache.call_key(model, (), example_inputs(arch, model, length=13), None, (), "code") is not None

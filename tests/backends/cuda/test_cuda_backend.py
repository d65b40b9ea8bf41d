"""The cuda backend and its plugin, on a machine with or without a GPU."""

from __future__ import annotations

from types import SimpleNamespace

import pluggy
import pytest
import torch

from lamina.backends.cuda import CudaBackend, emit_cuda, plugin
from lamina.backends.cuda import backend as backend_module
from lamina.core import hookspecs
from lamina.core.errors import LaminaError
from lamina.core.ir import kernel_ir as kir
from lamina.core.providers import Backend
from tests.backends.cuda import kernels


def registered(hook) -> list:
    found = []
    hook(found.append)
    return found


def test_the_plugin_validates_against_the_hook_specs():
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    manager.register(plugin)
    backends, targets = [], []
    manager.hook.lamina_register_backends(register=backends.append)
    manager.hook.lamina_register_targets(register=targets.append)
    assert [b.name for b in backends] == ["cuda"]
    assert isinstance(backends[0], Backend)
    assert sorted(t.name for t in targets) == ["sm_80", "sm_90"]


def test_targets_describe_hopper_and_ampere():
    targets = {t.arch: t for t in registered(plugin.lamina_register_targets)}
    hopper, ampere = targets["sm_90"], targets["sm_80"]
    assert (hopper.name, hopper.sm_count, hopper.max_shared_bytes_optin, hopper.max_shared_bytes_per_block) == (
        "sm_90", 132, 227 * 1024, 48 * 1024)
    assert (ampere.name, ampere.sm_count, ampere.max_shared_bytes_optin) == ("sm_80", 108, 163 * 1024)


def test_without_a_gpu_the_backend_says_why(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert CudaBackend().available() == "no CUDA GPU is visible to PyTorch"


def test_without_nvrtc_the_backend_says_what_to_install(monkeypatch):
    def missing():
        raise LaminaError("lamina could not load NVRTC: pip install nvidia-cuda-nvrtc")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(backend_module, "nvrtc_version", missing)
    assert "pip install nvidia-cuda-nvrtc" in CudaBackend().available()


def test_emit_prints_every_kernel():
    program = kir.Program([kernels.elementwise(10, name="first"), kernels.tiled_matmul(8, 8, 8)])
    sources = CudaBackend().emit(program, plugin.SM90)
    assert list(sources) == ["first", "tiled_matmul"]
    assert sources["tiled_matmul"] == emit_cuda(program.kernels[1])


def test_compile_needs_no_gpu(tmp_path):
    program = kir.Program([kernels.elementwise(10, name="first"), kernels.tiled_matmul(8, 8, 8)])
    compiled = CudaBackend(cache_dir=tmp_path).compile(program, "sm_90")
    assert {name: c.from_cache for name, c in compiled.items()} == {"first": False, "tiled_matmul": False}
    assert all(c.registers > 0 and not c.spills for c in compiled.values())
    assert len(list((tmp_path / "cubins").glob("*.cubin"))) == 2


def test_the_architecture_is_the_visible_gpus(monkeypatch):
    backend = CudaBackend()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert backend.arch(plugin.SM80) == "sm_80"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(backend_module, "device_arch", lambda: "sm_90")
    assert backend.arch(plugin.SM80) == "sm_90"


def test_kernel_names_must_be_unique(tmp_path):
    program = kir.Program([kernels.elementwise(10), kernels.elementwise(20)])
    compilation = SimpleNamespace(loop=None, kernels=program, target=plugin.SM90)
    with pytest.raises(LaminaError, match="several kernels named elementwise"):
        CudaBackend(cache_dir=tmp_path).load(compilation, plugin.SM90)

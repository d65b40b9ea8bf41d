"""A compile for the GPU prints each kernel and sets it compiling as soon as the pipeline has
lowered it (``lamina.backends.cuda.early_compile``); the backend's load then takes those cubins."""

from __future__ import annotations

import pytest
import torch

import lamina
from lamina.api import Compiler
from lamina.backends.cuda import early_compile
from lamina.backends.cuda.backend import CudaBackend
from lamina.backends.cuda.early_compile import EarlyCompile
from lamina.core.errors import CompileError
from lamina.core.cache_usage import finish_writes

from tests.backends.cuda.test_cuda_kernel_sources import layers


def inputs(rows: int = 13, device: str = "cpu"):
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(rows, 40, generator=generator)
    return [t.to(device) for t in (x, *(torch.randn(40, 40, generator=generator) for _ in range(4)))]


def compiled_for_the_gpu(tmp_path, monkeypatch, backend: CudaBackend, **config):
    """``layers`` compiled on the CPU as a compile for the GPU is: the CUDA backend takes its
    kernels while they are lowered."""
    monkeypatch.setattr(Compiler, "_backend_on", lambda self, device: backend)
    return lamina.compile(layers, tuple(inputs()), cache_dir=str(tmp_path), target="sm_90", **config).compilation


def test_kernels_compiled_while_lowering_are_those_a_later_compile_makes(tmp_path, monkeypatch):
    backend = CudaBackend(cache_dir=tmp_path / "early")
    compilation = compiled_for_the_gpu(tmp_path, monkeypatch, backend, program_cache=False)
    assert isinstance(compilation.prepared, EarlyCompile)
    early = backend.compile(compilation.kernels, "sm_90", prepared=compilation.prepared)
    later = CudaBackend(cache_dir=tmp_path / "later").compile(compilation.kernels, "sm_90")
    assert set(early) == {k.name for k in compilation.kernels.kernels}
    assert {name: (k.name, k.cubin) for name, k in early.items()} == {
        name: (k.name, k.cubin) for name, k in later.items()}
    assert not any(k.from_cache for k in early.values())


def test_a_kernel_that_nvrtc_refuses_raises_when_the_program_is_loaded(tmp_path, monkeypatch):
    def refuse(source, symbol, arch, options, cache_dir):
        raise CompileError(f"NVRTC refused {symbol}")

    monkeypatch.setattr(early_compile, "compile_kernel", refuse)
    backend = CudaBackend(cache_dir=tmp_path)
    compilation = compiled_for_the_gpu(tmp_path, monkeypatch, backend, program_cache=False)
    with pytest.raises(CompileError, match="NVRTC refused"):
        backend.compile(compilation.kernels, "sm_90", prepared=compilation.prepared)


def test_the_program_cache_keeps_the_program_without_the_compiles_under_way(tmp_path, monkeypatch):
    backend = CudaBackend(cache_dir=tmp_path)
    first = compiled_for_the_gpu(tmp_path, monkeypatch, backend, program_cache=True)
    backend.compile(first.kernels, "sm_90", key=first.key, prepared=first.prepared)
    finish_writes()
    again = lamina.compile(layers, tuple(inputs()), cache_dir=str(tmp_path), target="sm_90",
                           program_cache=True).compilation
    assert "loading from the program cache" in again.timings.stages
    assert again.prepared is None


@pytest.mark.gpu
def test_a_compile_on_the_gpu_compiles_its_kernels_while_lowering(tmp_path):
    args = inputs(rows=77, device="cuda")
    compiled = lamina.compile(layers, tuple(args), cache_dir=str(tmp_path), program_cache=False)
    timings = compiled.compilation.timings.stages
    assert "NVRTC" in timings and "CUDA printing" not in timings  # printed while lowering
    torch.testing.assert_close(compiled(*args), layers(*args), rtol=2e-3, atol=2e-3)

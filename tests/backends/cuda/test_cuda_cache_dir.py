"""The configured cache_dir reaches the cubin cache from Python as it does from lamina.toml and the environment.

NVRTC needs no GPU: loading a program on the CUDA backend compiles its kernels into the cache
before anything is launched, so the CPU tests load it with the launch preparation left out.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import lamina
from lamina.api import Pipeline
from lamina.backends.cuda import CudaBackend
from lamina.backends.cuda.driver import LaunchableKernel
from lamina.integrations.torch_compile import lamina_backend


def program(x):
    return torch.softmax(x, 1) * torch.sigmoid(x)


def cubins(root: Path) -> list[Path]:
    return sorted((root / "cubins").glob("*.cubin")) if (root / "cubins").is_dir() else []


@pytest.fixture
def without_a_gpu(monkeypatch, tmp_path):
    """Loading on the CUDA backend compiles every kernel and prepares no launch; the environment's
    cache directory is a folder of its own, which must stay empty where another is configured."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(LaunchableKernel, "prepare", lambda self, device=None: None)
    monkeypatch.setenv("LAMINA_CACHE_DIR", str(tmp_path / "environment"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_cache_dir_given_to_lamina_compile_reaches_the_cubin_cache(without_a_gpu):
    x = torch.randn(5, 37)
    compiled = lamina.compile(program, (x,), cache_dir=str(without_a_gpu / "python"))
    torch.testing.assert_close(compiled(x), program(x))
    compiled.compiler.backend("cuda").load(compiled.compilation)
    assert len(cubins(without_a_gpu / "python")) == compiled.kernel_count
    assert cubins(without_a_gpu / "environment") == []


def test_without_one_from_python_the_environment_decides(without_a_gpu):
    compiled = lamina.compile(program, (torch.randn(5, 37),))
    compiled.compiler.backend("cuda").load(compiled.compilation)
    assert len(cubins(without_a_gpu / "environment")) == compiled.kernel_count


def test_a_backend_given_its_own_directory_keeps_it(without_a_gpu):
    compiled = lamina.compile(program, (torch.randn(5, 37),), cache_dir=str(without_a_gpu / "python"))
    CudaBackend(cache_dir=without_a_gpu / "own").load(compiled.compilation)
    assert len(cubins(without_a_gpu / "own")) == compiled.kernel_count
    assert cubins(without_a_gpu / "python") == cubins(without_a_gpu / "environment") == []


def test_cache_dir_in_torch_compile_options_reaches_the_cubin_cache(without_a_gpu, monkeypatch):
    compilations = []
    compile_program = Pipeline.compile

    def recorded(self, graph, target, backend=None):
        compilations.append(compile_program(self, graph, target, backend))
        return compilations[-1]

    monkeypatch.setattr(Pipeline, "compile", recorded)
    torch._dynamo.reset()
    compiled = torch.compile(program, backend=lamina_backend, options={"cache_dir": str(without_a_gpu / "options")})
    x = torch.randn(5, 37)
    torch.testing.assert_close(compiled(x), program(x))
    (compilation,) = compilations
    CudaBackend().load(compilation)
    assert len(cubins(without_a_gpu / "options")) == len(compilation.kernels.kernels)
    assert cubins(without_a_gpu / "environment") == []


@pytest.mark.gpu
def test_a_program_run_on_the_gpu_caches_its_cubins_where_python_said(monkeypatch, tmp_path):
    monkeypatch.setenv("LAMINA_CACHE_DIR", str(tmp_path / "environment"))
    x = torch.randn(5, 37, device="cuda")
    compiled = lamina.compile(program, (x,), cache_dir=str(tmp_path / "python"))
    torch.testing.assert_close(compiled(x), program(x))
    assert len(cubins(tmp_path / "python")) == compiled.kernel_count
    assert cubins(tmp_path / "environment") == []


def test_the_kernel_cache_is_trimmed_to_the_configured_size_limit(without_a_gpu):
    """A program of several kernels into a cache that holds one: the kernels compiled, the cache
    is trimmed to the limit, the entries used longest ago removed first."""
    def several_kernels(x):
        return torch.softmax(x, 1) @ x.t() + x.sum()

    x = torch.randn(5, 37)
    root = without_a_gpu / "limited"
    compiled = lamina.compile(several_kernels, (x,), cache_dir=str(root))
    compiled.compiler.backend("cuda").load(compiled.compilation)
    assert compiled.kernel_count > 1 and len(cubins(root)) == compiled.kernel_count
    largest = max(path.stat().st_size for path in cubins(root))
    for path in cubins(root):
        path.unlink()
    limited = lamina.compile(several_kernels, (x,), cache_dir=str(root), cache_size_limit=str(largest))
    limited.compiler.backend("cuda").load(limited.compilation)
    assert 1 <= len(cubins(root)) < compiled.kernel_count
    assert sum(path.stat().st_size for path in cubins(root)) <= largest

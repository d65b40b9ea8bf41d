"""The ``cuda`` backend: Kernel IR printed as CUDA C++, compiled by NVRTC, launched through the driver."""

from __future__ import annotations

import concurrent.futures
import os
import re
from pathlib import Path
from typing import Any

import torch

from lamina.backends.cuda import dependent_launch
from lamina.backends.cuda.codegen import emit_cuda, kernel_symbol
from lamina.backends.cuda.cubin_cache import default_cache_dir
from lamina.backends.cuda.driver import LaunchableKernel, device_arch
from lamina.backends.cuda.nvrtc import CompiledKernel, compile_kernel, nvrtc_version
from lamina.backends.cuda.wgmma import kernel_arch
from lamina.core import cache_usage
from lamina.core.config import size_limit
from lamina.core.errors import CompileError, LaminaError
from lamina.core.ir import kernel_ir
from lamina.core.target import Target
from lamina.runtime.program_runner import ProgramRunner


def anonymous_kernel(kernel: kernel_ir.Kernel, name: str = "lamina_kernel") -> kernel_ir.Kernel:
    """``kernel`` named ``name``, its arrays by position, so that structurally equal kernels print
    as the same source. Launches pass parameters by position. The names are words and a number
    (``shared_0``, ``register_1``): the loops' index variables are a letter and a number (``r0``),
    and an array must not take one of their names."""
    mapping = {p.name: f"param_{i}" for i, p in enumerate(kernel.params)}
    mapping.update({a.name: f"{a.space}_{i}" for i, a in enumerate(kernel.arrays)})
    mapping.update({m.name: f"tensor_map_{i}" for i, m in enumerate(kernel.tensor_maps)})
    return kernel_ir.rename_arrays(kernel, mapping, name=name)


def shared_name(kernel: kernel_ir.Kernel) -> str:
    """The ``__global__`` name of ``kernel`` and the kernels equal to it: its own without the
    numbers that tell a model's layers apart (``linear_5_sum``: ``linear_sum``), so that a
    profiler's line names what the kernel computes and a repeated layer's kernels add up on one.
    A kernel of other code under the same name gets a number again, in order of first appearance
    (``mul``, ``mul_2``: a layer's norm and its silu * up), so that no line adds up two codes."""
    return re.sub(r"_\d+(?=_|$)", "", kernel.name) or kernel.name


def compile_threads(kernels: int) -> int:
    """Threads that run NVRTC at once: one per distinct kernel, up to the host's cores."""
    return max(1, min(kernels, os.cpu_count() or 1))


class CudaBackend:
    """Runs compiled programs on the GPU that PyTorch uses.

    ``cache_dir`` is where cubins are kept; by default the ``cache_dir`` of the configuration a
    program was compiled under (``lamina.compile(..., cache_dir=...)``, ``$LAMINA_CACHE_DIR``, the
    config file), else the user's cache directory. ``options`` are extra NVRTC options for every kernel.
    """

    name = "cuda"

    def __init__(self, cache_dir: Path | str | None = None, options: tuple[str, ...] = ()):
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.options = tuple(options)

    def available(self) -> str | None:
        if not torch.cuda.is_available():
            return "no CUDA GPU is visible to PyTorch"
        try:
            import cuda.bindings.driver  # noqa: F401
        except ImportError:
            return "cuda-python is not installed (pip install cuda-python)"
        try:
            nvrtc_version()
        except LaminaError as error:
            return str(error)
        return None

    def emit(self, program: kernel_ir.Program, target: Target | None = None) -> dict[str, str]:
        return {kernel.name: emit_cuda(kernel) for kernel in program.kernels}

    def arch(self, target: Target | None) -> str:
        """The visible GPU's architecture, else the target's: a cubin must match the GPU it runs on."""
        if torch.cuda.is_available():
            return device_arch()
        if target is None:
            raise LaminaError("the CUDA backend needs a target or a visible GPU to choose an architecture")
        return target.arch

    def cache_dir_for(self, compilation: Any) -> Path:
        """Where ``compilation``'s cubins are cached: this backend's ``cache_dir``, else the one its
        configuration names, else the configuration's default (``default_cache_dir``)."""
        if self.cache_dir is not None:
            return self.cache_dir
        config = getattr(compilation, "config", None)
        if config is not None and config.cache_dir is not None:
            return Path(config.cache_dir)
        return default_cache_dir()

    def compile(self, program: kernel_ir.Program, arch: str, cache_dir: Path | None = None,
                size_limit: int | None = None) -> dict[str, CompiledKernel]:
        """Every kernel of ``program`` compiled for ``arch`` (through the cubin cache under ``cache_dir``,
        else this backend's, else the configuration's); needs no GPU. With ``size_limit``, the caches
        under that directory are then trimmed to it (``cache_usage.trim``).

        Kernels that differ only in the names of their arrays (the same layer of a
        model, repeated) are compiled once: each is compiled under positional names. Distinct
        kernels compile at once on the host's cores (NVRTC releases Python's lock and may be
        called from several threads).
        A kernel that runs wgmma is compiled for ``sm_90a`` on sm_90 and refused elsewhere (``kernel_arch``),
        as is one whose launch overlaps the previous kernel's before sm_90 (``dependent_launch.check_arch``).
        """
        cache_dir = cache_dir or self.cache_dir or default_cache_dir()  # read once, not once per kernel
        first_of: dict[str, kernel_ir.Kernel] = {}
        symbol_of: dict[str, str] = {}
        source_of: dict[str, str] = {}
        emitted: dict[kernel_ir.Kernel, str] = {}  # a model's layers repeat kernels: each is printed once
        distinct: dict[str, int] = {}  # kernels of different code under one shared name so far
        for kernel in program.kernels:
            anonymous = anonymous_kernel(kernel)
            if anonymous not in emitted:
                base = shared_name(kernel)
                distinct[base] = distinct.get(base, 0) + 1
                named = anonymous_kernel(kernel, base if distinct[base] == 1 else f"{base}_{distinct[base]}")
                emitted[anonymous] = emit_cuda(named)
                symbol_of[emitted[anonymous]] = kernel_symbol(named)
            source = source_of[kernel.name] = emitted[anonymous]
            if source not in first_of:
                dependent_launch.check_arch(kernel, arch)
                first_of[source] = kernel

        def compile_one(source: str) -> CompiledKernel:
            kernel = first_of[source]
            target_arch = kernel_arch(kernel, arch)
            try:
                return compile_kernel(source, symbol_of[source], target_arch, self.options, cache_dir)
            except CompileError:
                compile_kernel(emit_cuda(kernel), kernel_symbol(kernel), target_arch, self.options, cache_dir)
                raise

        with concurrent.futures.ThreadPoolExecutor(max_workers=compile_threads(len(first_of))) as pool:
            by_source = dict(zip(first_of, pool.map(compile_one, first_of)))
        if size_limit is not None and any(not k.from_cache for k in by_source.values()):
            cache_usage.trim(cache_dir, size_limit)
        return {name: by_source[source] for name, source in source_of.items()}

    def load(self, compilation: Any, target: Target | None = None) -> ProgramRunner:
        program: kernel_ir.Program = compilation.kernels
        names = [k.name for k in program.kernels]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise LaminaError(f"the Kernel IR program has several kernels named {', '.join(repeated)}; kernel names must be unique")
        arch = self.arch(target if target is not None else compilation.target)
        config = getattr(compilation, "config", None)
        compiled = self.compile(program, arch, self.cache_dir_for(compilation),
                                size_limit(config) if config is not None else None)
        kernels = {k.name: LaunchableKernel(k, compiled[k.name]) for k in program.kernels}
        for kernel in kernels.values():
            kernel.prepare()

        def launch(kernel: kernel_ir.Kernel, buffers: dict[str, torch.Tensor], sizes: dict[str, int]) -> None:
            kernels[kernel.name](buffers, sizes)

        return ProgramRunner(compilation.loop, program, launch=launch, device=torch.device("cuda"))

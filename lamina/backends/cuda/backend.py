"""The ``cuda`` backend: Kernel IR printed as CUDA C++, compiled by NVRTC, launched through the driver."""

from __future__ import annotations

import concurrent.futures
import os
from pathlib import Path
from typing import Any

import torch

from lamina.backends.cuda import dependent_launch
from lamina.backends.cuda.codegen import emit_cuda, launch_shared_bytes
from lamina.backends.cuda.cubin_cache import default_cache_dir
from lamina.backends.cuda.driver import LaunchableKernel, device_arch
from lamina.backends.cuda import kernel_sources
from lamina.backends.cuda.early_compile import EarlyCompile, compile_source
from lamina.backends.cuda.nvrtc import CompiledKernel, nvrtc_version
from lamina.core import cache_usage
from lamina.core.config import size_limit
from lamina.core.errors import LaminaError
from lamina.core.ir import kernel_ir
from lamina.core.target import Target
from lamina.core.timings import Timings
from lamina.runtime.program_runner import ProgramRunner


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

    def compile_while_lowering(self, compilation: Any) -> EarlyCompile:
        """Where the pipeline is to hand this backend each kernel of ``compilation`` as it is lowered
        (``early_compile``): called when the program will run on this backend's GPU."""
        return EarlyCompile(self.arch(compilation.target), self.options, self.cache_dir_for(compilation))

    def compile(self, program: kernel_ir.Program, arch: str, cache_dir: Path | None = None,
                size_limit: int | None = None, key: str | None = None,
                timings: Timings | None = None, prepared: EarlyCompile | None = None) -> dict[str, CompiledKernel]:
        """Every kernel of ``program`` compiled for ``arch`` (through the cubin cache under ``cache_dir``,
        else this backend's, else the configuration's); needs no GPU. With ``size_limit``, the caches
        under that directory are then trimmed to it (``cache_usage.trim``).

        Kernels that differ only in the names of their arrays (the same layer of a
        model, repeated) are compiled once: each is compiled under positional names
        (``kernel_sources``, which keeps them under the program cache's ``key`` where there is
        one). Distinct kernels compile at once on the host's cores (NVRTC releases Python's lock
        and may be called from several threads).
        A kernel that runs wgmma is compiled for ``sm_90a`` on sm_90 and refused elsewhere (``kernel_arch``),
        as is one whose launch overlaps the previous kernel's before sm_90 (``dependent_launch.check_arch``).
        ``timings`` gets the stages "CUDA printing" and "NVRTC" (the cubin cache's reads within it).
        With ``prepared`` (``compile_while_lowering``), the kernels were printed and set compiling while the pipeline
        lowered them: "NVRTC" is then the wait for the compiles still running.
        """
        timings = timings or Timings()
        cache_dir = cache_dir or self.cache_dir or default_cache_dir()  # read once, not once per kernel
        if prepared is not None:
            with timings.stage("NVRTC"):
                printed, compiled = prepared.compiled()
            kernel_sources.keep(printed, key, cache_dir, size_limit)
        else:
            with timings.stage("CUDA printing"):
                printed = kernel_sources.kernel_sources(program, key, cache_dir, size_limit)
        by_name = {kernel.name: kernel for kernel in program.kernels}
        for name in printed.first:
            dependent_launch.check_arch(by_name[name], arch)
        if prepared is None:
            def compile_one(index: int) -> CompiledKernel:
                return compile_source(printed.sources[index], printed.symbols[index], by_name[printed.first[index]],
                                      arch, self.options, cache_dir)

            with timings.stage("NVRTC"), concurrent.futures.ThreadPoolExecutor(
                    max_workers=compile_threads(len(printed.sources))) as pool:
                compiled = list(pool.map(compile_one, range(len(printed.sources))))
        if size_limit is not None and any(not k.from_cache for k in compiled):
            cache_usage.trim(cache_dir, size_limit)
        return {name: compiled[index] for name, index in printed.source_of.items()}

    def load(self, compilation: Any, target: Target | None = None) -> ProgramRunner:
        program: kernel_ir.Program = compilation.kernels
        names = [k.name for k in program.kernels]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise LaminaError(f"the Kernel IR program has several kernels named {', '.join(repeated)}; kernel names must be unique")
        arch = self.arch(target if target is not None else compilation.target)
        config = getattr(compilation, "config", None)
        cache_dir = self.cache_dir_for(compilation)
        prepared = getattr(compilation, "prepared", None)
        if prepared is not None:
            compilation.prepared = None  # its threads are done with once loaded
        if not (isinstance(prepared, EarlyCompile) and prepared.arch == arch and prepared.cache_dir == cache_dir
                and prepared.options == self.options):
            prepared = None
        compiled = self.compile(program, arch, cache_dir, size_limit(config) if config is not None else None,
                                getattr(compilation, "key", None), getattr(compilation, "timings", None), prepared)
        shared_bytes: dict[tuple, int] = {}  # by cubin and launch: a model's repeated layers lay out shared memory alike
        kernels = {}
        for k in program.kernels:
            same = (id(compiled[k.name]), k.launch)
            if same not in shared_bytes:
                shared_bytes[same] = launch_shared_bytes(k)
            kernels[k.name] = LaunchableKernel(k, compiled[k.name], shared_bytes[same])
        for kernel in kernels.values():
            kernel.prepare()

        def launch(kernel: kernel_ir.Kernel, buffers: dict[str, torch.Tensor], sizes: dict[str, int]) -> None:
            kernels[kernel.name](buffers, sizes)

        return ProgramRunner(compilation.loop, program, launch=launch, device=torch.device("cuda"))

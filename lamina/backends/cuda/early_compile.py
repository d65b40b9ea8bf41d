"""Kernels compiled while the pipeline still lowers the rest of the program.

NVRTC takes seconds for a model, most of it for one kernel (attention's), and it releases Python's
lock. So when a compile is for a GPU that the CUDA backend will run it on, the pipeline hands each
kernel to the backend as soon as it is lowered (``CudaBackend.compile_while_lowering``): a kernel of new code is
printed at once and compiled on a thread of its own, and a model's first layer sets its slowest
kernels compiling while the pipeline lowers the other layers. ``CudaBackend.load`` then takes the
printed sources and waits for the cubins that are not ready yet.
"""

from __future__ import annotations

import concurrent.futures
import os
from pathlib import Path

from lamina.backends.cuda.codegen import emit_cuda, kernel_symbol
from lamina.backends.cuda.kernel_sources import KernelSources, SourcePrinter
from lamina.backends.cuda.nvrtc import CompiledKernel, compile_kernel
from lamina.backends.cuda.wgmma import kernel_arch
from lamina.core.errors import CompileError
from lamina.core.ir import kernel_ir


def compile_source(source: str, symbol: str, kernel: kernel_ir.Kernel, arch: str, options: tuple[str, ...],
                   cache_dir: Path) -> CompiledKernel:
    """``source`` (``kernel`` under positional names) compiled for ``kernel``'s architecture on
    ``arch`` (``kernel_arch``), through the cubin cache. Where NVRTC refuses it, the kernel is
    compiled again under its own names, so that the error names the program's arrays."""
    target_arch = kernel_arch(kernel, arch)
    try:
        return compile_kernel(source, symbol, target_arch, options, cache_dir)
    except CompileError:
        compile_kernel(emit_cuda(kernel), kernel_symbol(kernel), target_arch, options, cache_dir)
        raise


class EarlyCompile:
    """One program's kernels, printed as the pipeline lowers them and compiled on threads of
    their own (at most one per core) for ``arch``, with ``options``, through the cubin cache
    under ``cache_dir``."""

    def __init__(self, arch: str, options: tuple[str, ...], cache_dir: Path):
        self.arch, self.options, self.cache_dir = arch, options, cache_dir
        self._printer = SourcePrinter()
        self._compiles: list[concurrent.futures.Future[CompiledKernel]] = []
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1,
                                                           thread_name_prefix="lamina-nvrtc")

    def add(self, kernel: kernel_ir.Kernel, repeats: str | None = None) -> None:
        """``kernel``, just lowered, in program order; ``repeats`` names the earlier kernel whose
        Kernel IR it took, renamed (``KernelLowering.repeats``), if any."""
        new = self._printer.add(kernel, repeats)
        if new is not None:
            printer = self._printer
            self._compiles.append(self._pool.submit(
                compile_source, printer.sources[new], printer.symbols[new], printer.first[new], self.arch,
                self.options, self.cache_dir))

    def compiled(self) -> tuple[KernelSources, list[CompiledKernel]]:
        """The program's distinct sources and their cubins, in the same order, once every compile
        has ended; a compile's error is raised here."""
        try:
            return self._printer.printed(), [compile.result() for compile in self._compiles]
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)

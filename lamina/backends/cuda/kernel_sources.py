"""Which CUDA source each kernel of a program runs: printed once per distinct kernel, and kept on
disk per program so that a program loaded from the program cache prints nothing.

A model's layers repeat their kernels under other buffer names, and the kernels that are equal
under positional names (``anonymous_kernel``) share one source and one cubin. A kernel that the
lowering made by renaming an earlier one (``Program.repeats``) takes that one's source at once;
any other is renamed and compared, which walks its whole Kernel IR (seconds for a model's
hundreds of kernels: ``experiments/compile_time/``).
Where the program has a program cache key (``Compilation.key``), the sources are kept in the
``kernel-sources`` folder of the cache directory under that key, an entry like the program
cache's: a warm start reads them, and each cubin comes from the cubin cache by its source's
digest. The key names everything the program is compiled from and lamina's code, and so the
Kernel IR that the printing reads.
"""

from __future__ import annotations

import re
from pathlib import Path

import attrs

from lamina.backends.cuda.codegen import emit_cuda, kernel_symbol
from lamina.core.ir import kernel_ir
from lamina.core.program_cache import ProgramCache

FOLDER = "kernel-sources"


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


@attrs.frozen
class KernelSources:
    """The distinct sources of a program and which kernel runs which."""

    sources: tuple[str, ...]
    symbols: tuple[str, ...]
    """Each source's ``__global__`` name."""
    first: tuple[str, ...]
    """The name of the first kernel that runs each source: its Kernel IR decides the architecture
    the source is compiled for, and names the arrays of an error's source."""
    source_of: dict[str, int]
    """Each kernel's source, by the kernel's name."""

    def fits(self, program: kernel_ir.Program) -> bool:
        """Whether these are the sources of a program of ``program``'s kernels."""
        return list(self.source_of) == [k.name for k in program.kernels] and all(
            0 <= i < len(self.sources) for i in self.source_of.values())


class SourcePrinter:
    """Prints a program's kernels in order, each distinct source once: a kernel at a time, so that
    a source can be compiled while the pipeline still lowers the kernels after it
    (``early_compile``). A kernel that the lowering says repeats an earlier one takes that one's
    source without being renamed and compared."""

    def __init__(self) -> None:
        self._index_of: dict[kernel_ir.Kernel, int] = {}  # by the kernel under positional names
        self.sources: list[str] = []
        self.symbols: list[str] = []
        """Each source's ``__global__`` name."""
        self.first: list[kernel_ir.Kernel] = []
        """The first kernel that runs each source."""
        self._source_of: dict[str, int] = {}
        self._distinct: dict[str, int] = {}  # kernels of different code under one shared name so far
        self._index_of_source: dict[str, int] = {}
        self._by_name: dict[str, kernel_ir.Kernel] = {}

    def add(self, kernel: kernel_ir.Kernel, repeats: str | None = None) -> int | None:
        """Prints ``kernel`` (which repeats the earlier kernel named ``repeats``, if any); the
        index of its source where that source is new, else None."""
        self._by_name[kernel.name] = kernel
        if repeats in self._source_of and _alike(kernel, self._by_name[repeats]):
            self._source_of[kernel.name] = self._source_of[repeats]
            return None
        anonymous = anonymous_kernel(kernel)
        new = None
        if anonymous not in self._index_of:
            base = shared_name(kernel)
            self._distinct[base] = self._distinct.get(base, 0) + 1
            count = self._distinct[base]
            named = anonymous_kernel(kernel, base if count == 1 else f"{base}_{count}")
            source = emit_cuda(named)
            if source not in self._index_of_source:
                new = self._index_of_source[source] = len(self.sources)
                self.sources.append(source)
                self.symbols.append(kernel_symbol(named))
                self.first.append(kernel)
            self._index_of[anonymous] = self._index_of_source[source]
        self._source_of[kernel.name] = self._index_of[anonymous]
        return new

    def printed(self) -> KernelSources:
        """The sources of the kernels added so far."""
        return KernelSources(tuple(self.sources), tuple(self.symbols), tuple(k.name for k in self.first),
                             dict(self._source_of))


def print_sources(program: kernel_ir.Program) -> KernelSources:
    """Every kernel of ``program`` printed under positional names, each distinct source once."""
    printer = SourcePrinter()
    repeats = dict(program.repeats)
    for kernel in program.kernels:
        printer.add(kernel, repeats.get(kernel.name))
    return printer.printed()


def _alike(kernel: kernel_ir.Kernel, earlier: kernel_ir.Kernel) -> bool:
    """What can be checked at a glance of a kernel said to repeat ``earlier``."""
    return (kernel.launch == earlier.launch and len(kernel.params) == len(earlier.params)
            and [a.shape for a in kernel.arrays] == [a.shape for a in earlier.arrays]
            and len(kernel.body) == len(earlier.body))


def kernel_sources(program: kernel_ir.Program, key: str | None, cache_dir: Path,
                   size_limit: int | None = None) -> KernelSources:
    """``print_sources(program)``, read from the entry under ``key`` in ``cache_dir`` where one
    is there and written there where not; printed anew where ``key`` is None."""
    if key is None:
        return print_sources(program)
    found = ProgramCache(cache_dir, size_limit, FOLDER).get(key)
    if isinstance(found, KernelSources) and found.fits(program):
        return found
    return keep(print_sources(program), key, cache_dir, size_limit)


def keep(printed: KernelSources, key: str | None, cache_dir: Path, size_limit: int | None = None) -> KernelSources:
    """``printed``, written under ``key`` in ``cache_dir`` for a warm start (nowhere where ``key`` is None)."""
    if key is not None:
        ProgramCache(cache_dir, size_limit, FOLDER).put(key, printed)
    return printed

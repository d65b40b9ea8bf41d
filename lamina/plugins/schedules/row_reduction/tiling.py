"""How the row-reduction schedule spreads rows over the GPU, and the Tile IR that says so.

Threads of one row stride over it in vectors of ``vector_width`` adjacent elements
(thread ``t`` owns vectors ``t``, ``t + threads``, ...: a warp reads adjacent vectors),
16 bytes wide where the row divides into them, else single elements. With as many rows
as SMs or more, short rows get a warp each, several rows per block, and long rows a
block each, sized so that every thread owns a handful of elements: bandwidth decides,
and other rows hide each row's latency. With fewer rows nothing hides it, so a row gets
the number of threads that makes its critical path shortest (see ``latency``), and a
block to itself. A row read by more than one loop is kept in registers when it fits:
one pass over memory instead of one per loop. With fewer rows than SMs, the reads that
only the loops after a reduction make (RMSNorm's weight) are then loaded with the row
where they fit too (``prefetch_epilogue_reads``), so that the row does not wait for memory
twice. On the H200 that took the RMSNorms of one row 2 to 10 % faster; with a row per SM or
more, other rows hide that wait, and loading early made TinyLlama's S = 2048 norms 3 to 4 %
slower, 9 % cold for add + RMSNorm (``experiments/memory_bound/``).

Knobs the user may pin: ``threads`` (per row), ``rows_per_block``, ``row_in_registers``,
``prefetch_epilogue_reads`` and ``vector_width`` (a power of two up to 16 that divides the row, 1 for
single elements).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import attrs

from lamina.core.errors import ScheduleError
from lamina.core.ir import loop_ir, sizes, tile_ir
from lamina.core.target import Target
from lamina.plugins.schedules.renamed_knobs import Renamed, with_new_spellings
from lamina.plugins.schedules.row_reduction import latency, masked_reads, vectors
from lamina.plugins.schedules.row_reduction.recognise import RowReduction, pieces

SCHEDULE_NAME = "row_reduction"

WARP_ROW_MAX = 1024
"""Rows up to this length may get one warp each (at most 32 elements per lane)..."""
WARP_ROW_REGISTERS = 32
"""...if each lane keeps at most this many registers of the row: past that, a block of
threads sharing the row holds it with fewer registers each."""
ELEMENTS_PER_THREAD = 8
"""A block per row is sized so that each thread owns at most this many elements of a row it
keeps in registers, and at least this many of a row it reads once: there each thread has more
loads in flight, and fewer threads wait at the block's reduction. On the H200 that took
TinyLlama's down projection of one token (rows of 5632) from 1024 threads to 512, and 17 %
off its time cold; Qwen's qkv projection from 512 to 256, 8 % (``experiments/memory_bound/``)."""
READ_ONCE_VECTORS_PER_THREAD = 2
"""...and, for a row read once, at least this many of its vectors (eight bf16 elements are one
16-byte load, too few in flight)..."""
READ_ONCE_MAX_THREADS = 256
"""...and at most this many threads: with a row per block or more on every SM, fewer threads with
more loads each read as fast, and a block of 512 or 1024 waits longer at its reduction. One
token's bf16 projections: Qwen's down projection (rows of 18944) 10 % faster cold on an H100 at
256 threads than at 1024, TinyLlama's (5632) 9 % at 256 than at 512
(``experiments/memory_bound/``)."""
WARP_ROWS_PER_BLOCK = 4
"""Rows (warps) per block for short rows: 128 threads, enough warps per SM to hide latency;
fewer where that would leave SMs without a block."""
MAX_VECTOR_WIDTH = 16
"""The widest vector a thread owns: 16 one-byte elements in one access, 16 fp32 in four."""
REGISTERS_PER_BLOCK = 64 * 1024
"""32-bit registers an SM gives one block at most (sm_70 and later)."""
REGISTERS_LEFT = 32
"""Registers a thread needs besides the row it keeps: indices, accumulators, temporaries."""
MAX_ROW_REGISTERS = 48
"""Registers a thread may spend on the row, however few threads the block has: the
unrolled loops over the row need room for their addresses and temporaries too."""


RENAMED = (Renamed("early_reads", "prefetch_epilogue_reads"),)


@attrs.frozen
class RowDecisions:
    threads: int
    """Threads per row: 32 is a warp per row (warp shuffles only), more is a block tree."""
    rows_per_block: int
    row_in_registers: bool
    vector_width: int
    """Adjacent elements a thread owns together and moves as one access where it can."""
    prefetch_epilogue_reads: bool = False
    """Whether the reads after a reduction are loaded with the row kept in registers."""

    @property
    def strategy(self) -> str:
        return "warp_shuffle" if self.threads <= 32 else "block_tree"

    def vectors_per_thread(self, length: sizes.Size) -> sizes.Size:
        """Each thread's vectors of a row of ``length``: counted at run time where the length is."""
        return sizes.blocks(length, self.threads * self.vector_width)

    def elements_per_thread(self, length: int) -> int:
        return self.vectors_per_thread(length) * self.vector_width


def row_registers(row: RowReduction, threads: int, width: int) -> int:
    """Registers per thread that keeping the row in registers takes."""
    return RowDecisions(threads, 1, True, width).elements_per_thread(row.length) * len(row.shared_reads)


def early_registers(row: RowReduction, threads: int, width: int) -> int:
    """Registers per thread that loading the reads after a reduction with the row takes."""
    return RowDecisions(threads, 1, True, width).elements_per_thread(row.length) * len(row.reads_after_a_reduction)


def register_budget(threads_per_block: int) -> int:
    """Registers a thread may spend on the row without spilling at this block size."""
    return min(MAX_ROW_REGISTERS, REGISTERS_PER_BLOCK // threads_per_block - REGISTERS_LEFT)


def decide(row: RowReduction, target: Target, knobs: Mapping[str, Any]) -> RowDecisions:
    """The pinned knobs, and for the others what suits the row length and row count."""
    knobs = with_new_spellings(knobs, RENAMED)
    width = _pinned_width(knobs, row)
    if width is None:
        width = vectors.default_width(row)
    counted = sizes.is_symbolic(row.length)  # a row's length known only at run time: never held in registers
    weighed = hinted(row)
    threads = _pinned_threads(knobs, target)
    if threads is None:
        threads = _default_threads(weighed, target, width)
    rows_per_block = _pinned_rows_per_block(knobs, threads, target)
    if rows_per_block is None:
        rows_per_block = _default_rows_per_block(weighed, threads, target)
    budget = register_budget(threads * rows_per_block)
    needed = row_registers(weighed, threads, width)
    fits = needed <= budget and row.one_length and not counted
    in_registers = _switch(
        knobs, "row_in_registers", fits and bool(row.shared_reads), fits,
        f"kernel {row.kernel.name}: the knob row_in_registers = true needs a row whose length is a number, "
        f"and this row has {row.length} elements; leave it false" if counted else
        f"kernel {row.kernel.name}: the knob row_in_registers = true needs {needed} "
        f"registers per thread for a row of {row.length} with {threads} threads per row, more than the "
        f"{budget} a block of {threads * rows_per_block} threads leaves; pin more threads or leave it false"
        if row.one_length else
        f"kernel {row.kernel.name}: the knob row_in_registers = true needs every loop over the row to have one "
        "length, and this kernel's loops have several; leave it false")
    early = _prefetch_epilogue_reads(weighed, knobs, in_registers, sizes.hint(row.row_count) < target.sm_count,
                                     budget - needed,
                                     threads, width)
    return RowDecisions(threads, rows_per_block, in_registers, width, early)


def hinted(row: RowReduction) -> RowReduction:
    """``row`` with its length at its hint where it is known only at run time: what choices of speed
    weigh."""
    return attrs.evolve(row, length=sizes.hint(row.length)) if sizes.is_symbolic(row.length) else row


def _prefetch_epilogue_reads(row: RowReduction, knobs: Mapping[str, Any], in_registers: bool, few_rows: bool,
                             left: int, threads: int, width: int) -> bool:
    """Whether the reads after a reduction are loaded with the row: for few rows, where the
    row is kept in registers and they fit in the registers it leaves; pinned, wherever they can."""
    needed = early_registers(row, threads, width)
    fits = in_registers and bool(row.reads_after_a_reduction) and needed <= left
    return _switch(
        knobs, "prefetch_epilogue_reads", fits and few_rows, fits,
        f"kernel {row.kernel.name}: the knob prefetch_epilogue_reads = true needs the row kept in registers, reads "
        f"after a reduction, and {needed} more registers per thread than the row's, within the {left} it leaves; "
        "pin row_in_registers = true with more threads, or leave prefetch_epilogue_reads false")


def _switch(knobs: Mapping[str, Any], name: str, chosen: bool, usable: bool, unusable: str) -> bool:
    """A knob that is true or false: ``chosen`` unless pinned; pinned true only where ``usable``,
    else a ``ScheduleError`` that says ``unusable``."""
    pinned = knobs.get(name)
    if pinned is None:
        return chosen
    if not isinstance(pinned, bool):
        raise ScheduleError(f"the knob {name} = {pinned!r} is not usable by the row_reduction schedule: "
                            "it must be true or false")
    if pinned and not usable:
        raise ScheduleError(unusable)
    return pinned


def _default_threads(row: RowReduction, target: Target, width: int) -> int:
    """With fewer rows than SMs, the thread count whose row finishes first. Otherwise a warp
    for rows up to ``WARP_ROW_MAX`` whose lanes keep at most ``WARP_ROW_REGISTERS``, else a
    block per row of about ``ELEMENTS_PER_THREAD`` elements per thread (for a row read once, at
    least ``READ_ONCE_VECTORS_PER_THREAD`` vectors, and at most ``READ_ONCE_MAX_THREADS`` threads)."""
    if sizes.hint(row.row_count) < target.sm_count:  # a count known only at run time at its hint
        return _fastest_threads(row, target, width)
    per_lane = math.ceil(row.length / target.warp_size) * max(1, len(row.shared_reads))
    if row.length <= WARP_ROW_MAX and per_lane <= WARP_ROW_REGISTERS:
        return target.warp_size
    if row.shared_reads:
        wanted = _power_of_two_at_least(math.ceil(row.length / ELEMENTS_PER_THREAD))
    else:
        wanted = min(READ_ONCE_MAX_THREADS, _power_of_two_at_most(
            row.length // max(ELEMENTS_PER_THREAD, READ_ONCE_VECTORS_PER_THREAD * width)))
    return max(2 * target.warp_size, min(wanted, target.max_threads_per_block))


def _fastest_threads(row: RowReduction, target: Target, width: int) -> int:
    """The power of two of threads per row, from a warp to a full block, with the shortest
    critical path for one row (the fewest threads among equals)."""
    timed = []
    threads = target.warp_size
    while threads <= target.max_threads_per_block:
        in_registers = bool(row.shared_reads) and row.one_length \
            and row_registers(row, threads, width) <= register_budget(threads)
        elements = RowDecisions(threads, 1, in_registers, width).elements_per_thread(row.length)
        timed.append((latency.row_us(row, threads, elements, in_registers, target.warp_size), threads))
        threads *= 2
    return min(timed)[1]


def _default_rows_per_block(row: RowReduction, threads: int, target: Target) -> int:
    """One row per block of more than a warp; for a warp per row, up to ``WARP_ROWS_PER_BLOCK``
    rows while the blocks still cover every SM."""
    if threads > target.warp_size:
        return 1
    rows = WARP_ROWS_PER_BLOCK
    while rows > 1 and math.ceil(sizes.hint(row.row_count) / rows) < target.sm_count:
        rows //= 2
    return rows


def _power_of_two_at_least(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))


def _power_of_two_at_most(n: int) -> int:
    return 1 << max(0, int(n).bit_length() - 1)


def _is_power_of_two(n: Any) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n > 0 and n & (n - 1) == 0


def _pinned_width(knobs: Mapping[str, Any], row: RowReduction) -> int | None:
    pinned = knobs.get("vector_width")
    if pinned is None:
        return None
    if not _is_power_of_two(pinned) or pinned > MAX_VECTOR_WIDTH:
        raise ScheduleError(
            f"the knob vector_width = {pinned!r} is not usable by the row_reduction schedule: it must be a power "
            f"of two from 1 (single elements) to {MAX_VECTOR_WIDTH}")
    if pinned > 1 and not vectors.has_vector_access(row, pinned):
        raise ScheduleError(
            f"kernel {row.kernel.name}: the knob vector_width = {pinned} is not usable by the row_reduction "
            f"schedule: the row of {row.length} does not divide into {pinned}-element vectors that some access "
            f"moves whole and aligned; pin a width that divides {row.length}, or 1")
    return pinned


def _pinned_threads(knobs: Mapping[str, Any], target: Target) -> int | None:
    pinned = knobs.get("threads")
    if pinned is None:
        return None
    if not _is_power_of_two(pinned) or not target.warp_size <= pinned <= target.max_threads_per_block:
        raise ScheduleError(
            f"the knob threads = {pinned!r} is not usable by the row_reduction schedule: threads per row must be "
            f"a power of two between {target.warp_size} (a warp per row) and {target.max_threads_per_block}")
    return pinned


def _pinned_rows_per_block(knobs: Mapping[str, Any], threads: int, target: Target) -> int | None:
    pinned = knobs.get("rows_per_block")
    if pinned is None:
        return None
    most = target.max_threads_per_block // threads
    if not _is_power_of_two(pinned) or pinned > most:
        raise ScheduleError(
            f"the knob rows_per_block = {pinned!r} is not usable by the row_reduction schedule with {threads} "
            f"threads per row: it must be a power of two up to {most}, so that a block has at most "
            f"{target.max_threads_per_block} threads")
    return pinned


def knobs_of(tile: tile_ir.TileKernel) -> RowDecisions:
    """The decisions a tile records, for its lowering."""
    values = dict(tile.knobs)
    return RowDecisions(values["threads"], values["rows_per_block"], values["row_in_registers"], tile.vector_width,
                        "prefetch_epilogue_reads" in values)


def as_one(kernel: loop_ir.Kernel, found: tuple[RowReduction, ...]) -> RowReduction:
    """The row reductions ``found`` in ``kernel`` (its ``pieces``) as the schedule weighs them: the
    first one's row, as many rows as all of them have, every buffer of the kernel."""
    if len(found) == 1:
        return found[0]
    first = found[0]
    rows = (attrs.evolve(first.rows[-1], extent=sum(piece.row_count for piece in found)),)
    return attrs.evolve(first, kernel=kernel, rows=rows)


def decide_for_all(kernel: loop_ir.Kernel, target: Target, knobs: Mapping[str, Any]
                   ) -> tuple[tuple[RowReduction, ...], RowDecisions]:
    """``kernel``'s row reductions and one setting for all of them: the one chosen for them as one,
    which every one of them must be able to run (else a ``ScheduleError``)."""
    found = pieces(kernel)
    decisions = decide(as_one(kernel, found), target, knobs)
    if len(found) > 1:
        pinned = {**knobs, **attrs.asdict(decisions)}
        for piece in found:
            if decide(piece, target, pinned) != decisions:
                raise ScheduleError(f"kernel {kernel.name}: its row reductions cannot run under one setting")
    return found, decisions


def tile(kernel: loop_ir.Kernel, target: Target, knobs: Mapping[str, Any]) -> tile_ir.TileKernel:
    """The row-reduction Tile IR of ``kernel``."""
    found, decisions = decide_for_all(kernel, target, knobs)
    row = as_one(kernel, found)
    rows = tile_ir.AxisBinding(
        vars=tuple(loop.var for loop in found[0].rows), extent=row.row_count, block_dim="x",
        threads=decisions.rows_per_block, thread_dim="y",
    )
    plan = tile_ir.ReductionPlan(
        vars=row.reduce_vars, extent=row.reduce_length, strategy=decisions.strategy, splits=decisions.threads
    )
    result = tile_ir.TileKernel(
        kernel=kernel, schedule=SCHEDULE_NAME, grid=(rows,), reduction=plan, vector_width=decisions.vector_width,
        knobs=(
            ("threads", decisions.threads),
            ("rows_per_block", decisions.rows_per_block),
            ("elements_per_thread", decisions.elements_per_thread(row.length)),
            ("row_in_registers", decisions.row_in_registers),
        ) + _describe_prefetched_reads(row, decisions) + _describe_vectors(row, decisions.vector_width)
        + _describe_masked_loads(row, decisions) + _describe_pieces(found, decisions),
    )
    tile_ir.verify_tile_kernel(result, target.max_threads_per_block, target.max_shared_bytes_optin)
    return result


def _describe_pieces(found: tuple[RowReduction, ...], decisions: RowDecisions) -> tuple[tuple[str, str], ...]:
    """Where the kernel is several row reductions: the blocks that run each one."""
    if len(found) == 1:
        return ()
    parts, first = [], 0
    for piece in found:
        blocks = sizes.blocks(piece.row_count, decisions.rows_per_block)
        outputs = ", ".join(b.name for b in piece.kernel.outputs)
        parts.append(f"blocks {first} to {first + blocks - 1}: {piece.row_count} rows into {outputs}")
        first += blocks
    return (("pieces", f"{len(found)} row reductions one after another, a block's rows in one: " + "; ".join(parts)),)


def _describe_prefetched_reads(row: RowReduction, decisions: RowDecisions) -> tuple[tuple[str, str], ...]:
    """The reads after a reduction that are loaded with the row."""
    if not decisions.prefetch_epilogue_reads:
        return ()
    return (("prefetch_epilogue_reads", ", ".join(_key_text(key) for key in row.reads_after_a_reduction)
             + ", loaded with the row"),)


def _describe_vectors(row: RowReduction, width: int) -> tuple[tuple[str, str], ...]:
    """The row accesses that move as vectors, with the row's column variable for the loops'."""
    loads, stores = {}, {}
    for phase in row.phases:
        loop = phase.loop
        if loop is None or width == 1:
            continue
        for load in vectors.vector_loads(row, loop, width):
            loads.setdefault(row.key(load, loop.var), None)
        for store in vectors.vector_stores(row, loop, width):
            dtype = row.kernel.buffer(store.buffer).type.dtype
            stores.setdefault(row.key(loop_ir.Load(store.buffer, store.index, dtype), loop.var), None)
    groups = (("vector_loads", loads), ("vector_stores", stores))
    return tuple((name, ", ".join(_key_text(key) for key in keys)) for name, keys in groups if keys)


def _describe_masked_loads(row: RowReduction, decisions: RowDecisions) -> tuple[tuple[str, str], ...]:
    """The row accesses kept in registers that are not loaded where a mask leaves them unused."""
    width = decisions.vector_width
    if not decisions.row_in_registers:
        return ()
    found = []
    for key in row.shared_reads:
        buffer, idx, dtype = key
        unused = masked_reads.skippable_where(row, key)
        if unused is None:
            continue
        vector = width > 1 and vectors.is_vector_access(row.kernel, buffer, idx, dtype, row.column_name, width)
        found.append(f"{_key_text(key)} where {loop_ir.format_value(unused)}"
                     + (" at every column of a vector" if vector else ""))
    return (("masked_loads", ", ".join(found)),) if found else ()


def _key_text(key: tuple) -> str:
    buffer, idx, _ = key
    return f"{buffer}[{', '.join(loop_ir.format_index(i) for i in idx)}]"

"""How the row-reduction schedule spreads rows over the GPU, and the Tile IR that says so.

Threads of one row stride over it (thread ``t`` owns columns ``t``, ``t + threads``,
...: a warp reads adjacent elements). Short rows get a warp each, several rows per
block; long rows get a block each, sized so that every thread owns a handful of
elements. A row read by more than one loop is kept in registers when it fits: one
pass over memory instead of one per loop.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import attrs

from lamina.core.errors import ScheduleError
from lamina.core.ir import loop_ir, tile_ir
from lamina.core.target import Target
from lamina.plugins.schedules.row_reduction.recognise import RowReduction, analyse

SCHEDULE_NAME = "row_reduction"

WARP_ROW_MAX = 1024
"""Rows up to this length may get one warp each (at most 32 elements per lane)..."""
WARP_ROW_REGISTERS = 32
"""...if each lane keeps at most this many registers of the row: past that, a block of
threads sharing the row holds it with fewer registers each."""
ELEMENTS_PER_THREAD = 8
"""A block per row is sized so that each thread owns at most this many elements."""
WARP_ROWS_PER_BLOCK = 4
"""Rows (warps) per block for short rows: 128 threads, enough warps per SM to hide latency."""
REGISTERS_PER_BLOCK = 64 * 1024
"""32-bit registers an SM gives one block at most (sm_70 and later)."""
REGISTERS_LEFT = 32
"""Registers a thread needs besides the row it keeps: indices, accumulators, temporaries."""
MAX_ROW_REGISTERS = 48
"""Registers a thread may spend on the row, however few threads the block has: the
unrolled loops over the row need room for their addresses and temporaries too."""


@attrs.frozen
class RowDecisions:
    threads: int
    """Threads per row: 32 is a warp per row (warp shuffles only), more is a block tree."""
    rows_per_block: int
    row_in_registers: bool

    @property
    def strategy(self) -> str:
        return "warp_shuffle" if self.threads <= 32 else "block_tree"

    def elements_per_thread(self, length: int) -> int:
        return max(1, math.ceil(length / self.threads))


def row_registers(row: RowReduction, threads: int) -> int:
    """Registers per thread that keeping the row in registers takes."""
    return max(1, math.ceil(row.length / threads)) * len(row.shared_reads)


def register_budget(threads_per_block: int) -> int:
    """Registers a thread may spend on the row without spilling at this block size."""
    return min(MAX_ROW_REGISTERS, REGISTERS_PER_BLOCK // threads_per_block - REGISTERS_LEFT)


def decide(row: RowReduction, target: Target, knobs: Mapping[str, Any]) -> RowDecisions:
    """The pinned knobs, and for the others what suits the row length and row count."""
    threads = _pinned_threads(knobs, target)
    if threads is None:
        threads = _default_threads(row, target)
    rows_per_block = _pinned_rows_per_block(knobs, threads, target)
    if rows_per_block is None:
        rows_per_block = 1 if threads > 32 else min(WARP_ROWS_PER_BLOCK, _power_of_two_at_least(row.row_count))
    budget = register_budget(threads * rows_per_block)
    fits = row_registers(row, threads) <= budget
    pinned = knobs.get("row_in_registers")
    if pinned is None:
        in_registers = fits and bool(row.shared_reads)
    elif not isinstance(pinned, bool):
        raise ScheduleError(f"the knob row_in_registers = {pinned!r} is not usable by the row_reduction schedule: "
                            "it must be true or false")
    elif pinned and not fits:
        raise ScheduleError(
            f"kernel {row.kernel.name}: the knob row_in_registers = true needs {row_registers(row, threads)} "
            f"registers per thread for a row of {row.length} with {threads} threads per row, more than the "
            f"{budget} a block of {threads * rows_per_block} threads leaves; pin more threads or leave it false")
    else:
        in_registers = pinned
    return RowDecisions(threads, rows_per_block, in_registers)


def _default_threads(row: RowReduction, target: Target) -> int:
    """A warp for rows up to ``WARP_ROW_MAX`` whose lanes keep at most ``WARP_ROW_REGISTERS``,
    unless there are fewer rows than SMs and each is long enough (more than 8 per lane) to keep
    a whole block busy; else a block per row."""
    few_rows = row.row_count < target.sm_count
    per_lane = math.ceil(row.length / target.warp_size) * max(1, len(row.shared_reads))
    short = row.length <= WARP_ROW_MAX and per_lane <= WARP_ROW_REGISTERS
    if short and not (few_rows and row.length > 8 * target.warp_size):
        return target.warp_size
    wanted = _power_of_two_at_least(math.ceil(row.length / ELEMENTS_PER_THREAD))
    return max(2 * target.warp_size, min(wanted, target.max_threads_per_block))


def _power_of_two_at_least(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))


def _is_power_of_two(n: Any) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n > 0 and n & (n - 1) == 0


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
    return RowDecisions(values["threads"], values["rows_per_block"], values["row_in_registers"])


def tile(kernel: loop_ir.Kernel, target: Target, knobs: Mapping[str, Any]) -> tile_ir.TileKernel:
    """The row-reduction Tile IR of ``kernel``."""
    row = analyse(kernel)
    decisions = decide(row, target, knobs)
    rows = tile_ir.AxisBinding(
        vars=tuple(loop.var for loop in row.rows), extent=row.row_count, block_dim="x",
        threads=decisions.rows_per_block, thread_dim="y",
    )
    plan = tile_ir.ReductionPlan(
        vars=row.reduce_vars, extent=row.length, strategy=decisions.strategy, splits=decisions.threads
    )
    result = tile_ir.TileKernel(
        kernel=kernel, schedule=SCHEDULE_NAME, grid=(rows,), reduction=plan,
        knobs=(
            ("threads", decisions.threads),
            ("rows_per_block", decisions.rows_per_block),
            ("elements_per_thread", decisions.elements_per_thread(row.length)),
            ("row_in_registers", decisions.row_in_registers),
        ),
    )
    tile_ir.verify_tile_kernel(result, target.max_threads_per_block, target.max_shared_bytes_optin)
    return result

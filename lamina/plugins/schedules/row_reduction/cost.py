"""What a row-reduction kernel is expected to cost: its bytes, or its rows' latency.

The kernel reads each input once and writes each output once; a row that does not stay
in registers is read again by every loop over it. Moving those bytes takes them over
the target's bandwidth at the efficiency its accesses reach (16-byte vectors keep the
memory system busier than single elements). With few rows, what bounds the kernel is
rather how long each row takes (``latency``), once per wave of blocks. The estimate is
the larger of the two, plus the launch. The flops (a few per element) hide under the
memory traffic and are not counted.
"""

from __future__ import annotations

import math

import attrs

from lamina.core.errors import ScheduleError
from lamina.core.ir import loop_ir, sizes
from lamina.core.selection import Setting
from lamina.core.target import Target
from lamina.plugins.schedules.row_reduction import latency
from lamina.plugins.schedules.row_reduction.recognise import RowReduction
from lamina.plugins.schedules.row_reduction.tiling import SCHEDULE_NAME, RowDecisions, as_one, decide_for_all

VECTOR_EFFICIENCY = 0.9
"""Fraction of the copy bandwidth a row reduction with 16-byte accesses holds: the best
kernels reach about 90% for rows of 4k and more."""
SCALAR_EFFICIENCY = 0.8
"""The same with one element per access: more instructions per byte."""


def moved_bytes(row: RowReduction, decisions: RowDecisions) -> int:
    """Bytes read and written by the kernel the schedule makes of the row with ``decisions``."""
    rereads: dict[str, int] = {}
    if not decisions.row_in_registers:
        for (buffer, _, _), readers in row.readers.items():
            rereads[buffer] = max(rereads.get(buffer, 0), readers - 1)
    total = 0
    for b in row.kernel.inputs + row.kernel.outputs:
        size = sizes.hint(sizes.numel(b.type.shape)) * b.type.dtype.itemsize  # at its hint where symbolic
        total += size * (1 + rereads.get(b.name, 0))
    return total


def latency_us(row: RowReduction, decisions: RowDecisions, target: Target) -> float:
    """Each wave of blocks waits for its rows' critical path."""
    block = decisions.threads * decisions.rows_per_block
    at_once = target.sm_count * max(1, target.max_threads_per_sm // block)
    waves = math.ceil(math.ceil(sizes.hint(row.row_count) / decisions.rows_per_block) / at_once)
    elements = decisions.elements_per_thread(sizes.hint(row.length))
    reads_late = bool(row.reads_after_a_reduction) and not decisions.prefetch_epilogue_reads
    return waves * latency.row_us(row, decisions.threads, elements, decisions.row_in_registers, target.warp_size,
                                  reads_late)


def estimate_cost(kernel: loop_ir.Kernel, target: Target) -> float:
    """Estimated microseconds for one launch on ``target``, with the schedule's default decisions."""
    found, decisions = decide_for_all(kernel, target, {})
    return estimate_us(as_one(kernel, found), decisions, target)


def estimate_us(row: RowReduction, decisions: RowDecisions, target: Target) -> float:
    """Estimated microseconds for one launch of ``row`` with ``decisions``."""
    efficiency = VECTOR_EFFICIENCY if decisions.vector_width > 1 else SCALAR_EFFICIENCY
    bandwidth_us = moved_bytes(row, decisions) / (target.memory_bytes_per_us * efficiency)
    return max(bandwidth_us, latency_us(row, decisions, target)) + target.launch_us


def best_settings(kernel: loop_ir.Kernel, target: Target, count: int) -> list[Setting]:
    """The schedule's own decisions, then the cheapest others of a warp to a full block per row,
    the row kept in registers or read again: the estimate cannot tell most of them apart where
    the row is read at the bandwidth, which is where measuring them pays."""
    pieces, own = decide_for_all(kernel, target, {})
    row = as_one(kernel, pieces)
    found = {own: estimate_us(row, own, target)}
    threads = target.warp_size
    while threads <= target.max_threads_per_block:
        for in_registers in (True, False):
            try:
                _, decisions = decide_for_all(kernel, target, {"threads": threads, "row_in_registers": in_registers})
            except ScheduleError:
                continue
            found.setdefault(decisions, estimate_us(row, decisions, target))
        threads *= 2
    others = sorted((d for d in found if d != own), key=lambda d: found[d])
    return [Setting(SCHEDULE_NAME, attrs.asdict(d), found[d]) for d in [own, *others][:count]]

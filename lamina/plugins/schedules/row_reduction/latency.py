"""How long one row takes from its first load to its last store: what a kernel of few rows costs.

With fewer rows than the GPU can run at once, nothing hides the latency of a row:
each pass over memory waits for its loads, each thread walks its elements one after
the other in every loop over the row, and each reduction combines its partial
results in butterfly steps (and once across the warps of a block, behind a barrier).
More threads per row shorten the walk and lengthen the combining; the row takes the
thread count where their sum is least.
"""

from __future__ import annotations

import math

from lamina.plugins.schedules.row_reduction.recognise import RowReduction

MEMORY_LATENCY_US = 0.6
"""One round trip to DRAM, paid by each pass over the row (the loads of a pass are in flight together)."""
ELEMENT_US = 0.004
"""One element of one loop over the row, in one thread: its instructions and the accumulation
that waits for the previous element (about 8 cycles at 2 GHz)."""
SHUFFLE_US = 0.015
"""One butterfly step: a warp shuffle and the combine that waits for it."""
BARRIER_US = 0.02
"""The step across the warps of a block: a shared-memory store, a barrier and a load."""


def combine_us(threads: int, warp_size: int) -> float:
    """Combining one reduction's partial results across ``threads`` threads of a row."""
    steps = math.log2(min(threads, warp_size))
    if threads > warp_size:
        steps += math.log2(threads // warp_size)
        return steps * SHUFFLE_US + BARRIER_US
    return steps * SHUFFLE_US


def row_us(row: RowReduction, threads: int, elements_per_thread: int, in_registers: bool, warp_size: int,
           reads_late: bool = False) -> float:
    """One row's critical path with ``threads`` threads of ``elements_per_thread`` elements each.
    A row kept in registers is one pass over memory; ``reads_late``: the reads that only the loops
    after a reduction make wait for it, a second pass (a matrix-vector product's weights after the
    norm it computes itself)."""
    loops = [p for p in row.phases if p.loop is not None]
    reductions = sum(1 for p in loops if p.reduces)
    passes = (2 if reads_late else 1) if in_registers else len(loops)
    return (passes * MEMORY_LATENCY_US + len(loops) * elements_per_thread * ELEMENT_US
            + reductions * combine_us(threads, warp_size))

"""How the generic schedule spreads a loop kernel over the GPU: one thread per output point.

All parallel loops are flattened into one axis bound to ``blockIdx.x`` x
``threadIdx.x``; whatever lies inside them (reductions included) runs serially in
its thread. That is correct for every loop kernel, which is what a fallback must be.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from lamina.core.errors import ScheduleError, SymbolicSizeError
from lamina.core.ir import loop_ir, sizes, tile_ir
from lamina.core.ir.sizes import Size
from lamina.core.target import Target
from lamina.plugins.schedules.loop_to_kernel import split_parallel_nest

SMALL_BLOCK = 128
LARGE_BLOCK = 256


def choose_threads(total: Size, target: Target, knobs: Mapping[str, Any]) -> int:
    """Threads per block: the pinned ``threads`` knob, else as many as keep every SM busy.

    Small kernels get fewer threads (a whole number of warps) so that no block is
    mostly idle; large ones get 256 once there are enough points for two waves of
    such blocks. A count known only at run time is taken at its hint.
    """
    total = sizes.hint(total)
    pinned = knobs.get("threads")
    if pinned is not None:
        warp = target.warp_size
        if isinstance(pinned, bool) or not isinstance(pinned, int) or pinned <= 0 or pinned % warp or pinned > target.max_threads_per_block:
            raise ScheduleError(
                f"the knob threads = {pinned!r} is not usable by the generic schedule: it must be a multiple "
                f"of {warp} between {warp} and {target.max_threads_per_block}"
            )
        return pinned
    if total <= SMALL_BLOCK:
        return max(target.warp_size, math.ceil(total / target.warp_size) * target.warp_size)
    if total >= 2 * LARGE_BLOCK * target.sm_count:
        return LARGE_BLOCK
    return SMALL_BLOCK


def reduce_loops(body: tuple[loop_ir.Stmt, ...]) -> tuple[loop_ir.Loop, ...]:
    return tuple(s for s in loop_ir.statements(body) if isinstance(s, loop_ir.Loop) and s.kind == "reduce")


def reduce_iterations(body: tuple[loop_ir.Stmt, ...]) -> Size:
    """How many reduce-loop iterations one thread runs: nested loops multiply, loops one
    after the other (softmax's max and sum) add up."""
    total = 0
    for s in body:
        if isinstance(s, loop_ir.Loop):
            inner = reduce_iterations(s.body)
            if s.kind == "reduce":
                total += s.extent * (inner if inner != 0 else 1)
            else:
                total += s.extent * inner
    return total


SYMBOLIC_WORK_LIMIT = 2 ** 26
"""The most iterations (points times each point's serial loop, at the sizes' hints) of a kernel of
sizes known only at run time that the generic schedule takes: a decoding step's attention over its
growing cache is far below; a prompt's projections of symbolic length are above, and a program
with those is better compiled for concrete sizes, where the tiled schedules take them."""


def tile(kernel: loop_ir.Kernel, target: Target, knobs: Mapping[str, Any], schedule: str) -> tile_ir.TileKernel:
    """The generic Tile IR of ``kernel``; a ``SymbolicSizeError`` for a kernel of symbolic sizes with
    more work than ``SYMBOLIC_WORK_LIMIT``."""
    loops, inner = split_parallel_nest(kernel.body)
    total = sizes.numel([loop.extent for loop in loops])
    if loop_ir.has_symbolic_sizes(kernel):
        work = sizes.hint(total) * max(sizes.hint(reduce_iterations(inner)), 1)
        if work > SYMBOLIC_WORK_LIMIT:
            raise SymbolicSizeError(
                f"kernel {kernel.name} would run {work} iterations one thread per point (at the sizes of "
                "the example); its program is compiled for concrete sizes, where faster schedules take it")
    threads = choose_threads(total, target, knobs)
    binding = tile_ir.AxisBinding(
        vars=tuple(loop.var for loop in loops), extent=total, block_dim="x", threads=threads, per_thread=1
    )
    reductions = reduce_loops(inner)
    plan = None
    if reductions:
        plan = tile_ir.ReductionPlan(
            vars=tuple(loop.var for loop in reductions),
            extent=reduce_iterations(inner),
            strategy="serial",
        )
    pinned = (("threads", threads),) if "threads" in knobs else ()
    result = tile_ir.TileKernel(kernel=kernel, schedule=schedule, grid=(binding,), reduction=plan, knobs=pinned)
    tile_ir.verify_tile_kernel(result, target.max_threads_per_block, target.max_shared_bytes_optin)
    return result

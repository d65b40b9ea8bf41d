"""The unrolled-reduction schedule: a short reduction along an outer axis, as split-K's combine is.

``out[i, j] = epilogue(sum_{s < S} partials[s, i, j])`` reads, for every output, S values
a whole ``(i, j)`` plane apart. The row-reduction schedule reduces along a row's
contiguous axis and the pointwise one takes no reduction, which would leave such a kernel
to the generic fallback, one element per access. With S at most ``MAX_UNROLLED`` the
reduce loop is written out, ``epilogue(partials[0, i, j] + partials[1, i, j] + ...)``:
a pointwise kernel, which the pointwise schedule runs with neighbouring threads on
neighbouring ``j`` and 16-byte vector loads of every ``partials[s, i, j]``. It takes any
kernel of that shape whose reduced reads move a few elements at most along the innermost
loop: a max pooling's 2x2 window is such a reduction too, read every other element.
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from lamina.core.ir import expr as ex, index, kernel_ir, loop_ir, tile_ir
from lamina.core.target import Target
from lamina.plugins.schedules.contraction.recognise import outer_loads
from lamina.plugins.schedules.loop_to_kernel import combine, split_parallel_nest
from lamina.plugins.schedules.pointwise import PointwiseSchedule

MAX_UNROLLED = 32
"""Longer reductions would hold too many loaded vectors in a thread's registers at once."""
MAX_STEP = 4
"""Elements between the reads of neighbouring threads: up to a window's width (a 2x2 or 4x4
pooling), a warp's reads still share their 32-byte sectors."""

POINTWISE = PointwiseSchedule()


def short_reductions(kernel: loop_ir.Kernel) -> tuple[loop_ir.Loop, ...] | None:
    """The kernel's reduce loops when it is one or more short reductions, each an Init and a
    reduce loop of one Accumulate read contiguously along the innermost parallel loop, then
    stores (a combine that took in another combine has two); else None."""
    loops, inner = split_parallel_nest(kernel.body)
    pairs = len(inner) - len([s for s in inner if isinstance(s, loop_ir.Store)])
    if not loops or pairs == 0 or pairs % 2 or not all(isinstance(s, loop_ir.Store) for s in inner[pairs:]):
        return None
    found = []
    for init, reduce_loop in zip(inner[:pairs:2], inner[1:pairs:2]):
        if not (isinstance(init, loop_ir.Init) and isinstance(reduce_loop, loop_ir.Loop) and reduce_loop.kind == "reduce"
                and reduce_loop.extent <= MAX_UNROLLED and len(reduce_loop.body) == 1):
            return None
        (accumulate,) = reduce_loop.body
        if not (isinstance(accumulate, loop_ir.Accumulate) and accumulate.acc == init.acc):
            return None
        moving = [load for load in outer_loads(accumulate.value)
                  if any(reduce_loop.var in ex.free_vars(i) for i in load.index)]
        if not moving or not all(_walks_along(kernel, load, loops[-1].var) for load in moving):
            return None
        found.append(reduce_loop)
    return tuple(found)


def _walks_along(kernel: loop_ir.Kernel, load: loop_ir.Load, inner: str) -> bool:
    """Whether neighbouring threads (along ``inner``) read ``load`` at most a few elements apart,
    and not through another buffer: one element after the other (a combine's partial sums), or
    every other one (a max pooling's window, clamped at a ragged image's edge)."""
    if any(isinstance(node, loop_ir.Load) for i in load.index for node in ex.walk(i)):
        return False
    step = index.coefficient(index.linearize(load.index, kernel.buffer(load.buffer).type.shape), inner)
    return step is None or 0 < step <= MAX_STEP


def unrolled(kernel: loop_ir.Kernel) -> loop_ir.Kernel:
    """``kernel`` (which has ``short_reductions``) with every reduce loop written out: a pointwise kernel."""
    loops, inner = split_parallel_nest(kernel.body)
    values: dict[str, ex.Expr] = {}
    stores = []
    for s in inner:
        if isinstance(s, loop_ir.Init):
            init = s
        elif isinstance(s, loop_ir.Loop):
            (accumulate,) = s.body
            steps = [ex.substitute(accumulate.value, {**values, s.var: ex.const(step)}) for step in range(s.extent)]
            starts_at_zero = accumulate.op == "sum" and isinstance(init.value, ex.Const) and init.value.value == 0
            value = ex.cast(steps.pop(0), init.value.dtype) if starts_at_zero else init.value
            for step in steps:
                value = combine(accumulate.op, value, step)
            values[init.acc] = value
        else:
            stores.append(s)
    body: tuple[loop_ir.Stmt, ...] = loop_ir.map_expressions(tuple(stores), lambda e: ex.substitute(e, values))
    for loop in reversed(loops):
        body = (attrs.evolve(loop, body=body),)
    return attrs.evolve(kernel, body=body)


class UnrolledReductionSchedule:
    """Short reductions over an outer axis, run as the pointwise kernel they unroll to."""

    name = "unrolled_reduction"
    priority = 15
    knob_names = PointwiseSchedule.knob_names

    def applies(self, kernel: loop_ir.Kernel, target: Target) -> bool:
        return short_reductions(kernel) is not None

    def schedule(self, kernel: loop_ir.Kernel, target: Target, knobs: Mapping[str, Any]) -> tile_ir.TileKernel:
        reductions = short_reductions(kernel)
        tile = POINTWISE.schedule(unrolled(kernel), target, knobs)
        written = ", ".join(f"{loop.var} ({loop.extent})" for loop in reductions)
        reads = sum(loop.extent for loop in reductions)
        note = ("unrolled", f"reduce {written} written out: {reads} reads per output")
        return attrs.evolve(tile, kernel=kernel, schedule=self.name, knobs=(note,) + tile.knobs)

    def lower(self, tile: tile_ir.TileKernel, target: Target) -> kernel_ir.Kernel:
        return POINTWISE.lower(attrs.evolve(tile, kernel=unrolled(tile.kernel)), target)

    def estimate_cost(self, kernel: loop_ir.Kernel, target: Target) -> float:
        """The pointwise estimate of the unrolled kernel: every input read once, every output written once."""
        return POINTWISE.estimate_cost(unrolled(kernel), target)

"""Matrix-vector products of one input in one launch: a decoding step's query, key and value
projections.

At one token each projection is a row reduction, a row per output feature, every row reading the
same input vector. Where the key and value heads are few (grouped heads: TinyLlama's 256 rows of
each beside 2048 for the queries) their kernels move a megabyte each, and what they cost is mostly
a launch and the wait for their first loads, one after the other. Here the products run in one
launch, one after another in its blocks (``recognise.pieces``): each keeps its rows, its
epilogue and its outputs, all take one setting of the schedule, and the waits of the small ones
pass beside the large one's.

The rule joins, from the first such product on, each later product of the same vector over rows
as long that can run at its place (``analysis.may_run_at``), where one setting serves them all
and the cost model expects the one launch to take less than them apart.
"""

from __future__ import annotations

import functools
from typing import Any, Mapping

import attrs

from lamina.core.errors import ScheduleError
from lamina.core.ir import expr as ex, loop_ir, sizes
from lamina.core.target import Target
from lamina.plugins.fusion import analysis
from lamina.plugins.schedules.row_reduction import cost
from lamina.plugins.schedules.row_reduction.recognise import NotARowReduction, analyse
from lamina.plugins.schedules.row_reduction.schedule import RowReductionSchedule
from lamina.plugins.schedules.row_reduction.tiling import as_one, decide_for_all

VECTOR_COLUMN = ex.Var("column")
"""The reduction's variable in a vector's key, whatever each kernel names it."""


class JoinMatrixVectorProducts:
    name = "join_matrix_vector_products"
    priority = 43
    """After the products of one input join on Hopper's tensor cores (``join_products_of_one_input``,
    for many rows), before a program output is stored by its reader."""
    knob_namespace = "row_reduction"
    knob_names = RowReductionSchedule.knob_names

    def apply(self, program: loop_ir.Program, target: Target, knobs: Mapping[str, Any]) -> loop_ir.Program | None:
        buffers = analysis.buffers(program)

        def extend(group: _Group, other: loop_ir.Kernel) -> _Group | None:
            candidate = analysis.with_exact_inputs(attrs.evolve(
                group.kernel, body=group.kernel.body + other.body, outputs=group.kernel.outputs + other.outputs), buffers)
            candidate_us, other_us = estimate_us(candidate, target, knobs), estimate_us(other, target, knobs)
            if None in (group.us, candidate_us, other_us) or candidate_us >= group.us + other_us:
                return None
            return _Group(candidate, candidate_us)

        return analysis.joined_in_order(program, [vector_read(kernel) for kernel in program.kernels],
                                        lambda kernel: _Group(kernel, estimate_us(kernel, target, knobs)),
                                        extend, lambda group: True)


@attrs.frozen
class _Group:
    """Products joined so far, and their estimate in one launch (None where the schedule cannot run it)."""

    kernel: loop_ir.Kernel
    us: float | None


@functools.lru_cache(maxsize=8192)
def vector_read(kernel: loop_ir.Kernel) -> tuple | None:
    """What makes ``kernel`` a matrix-vector product: a reduction that sums a vector's elements (what
    follows none of its rows) times a matrix's (what follows them), and the loads of its reductions
    that follow none of its rows (the vector, or what it is computed from: a norm's input and
    weight), as a key that two kernels reading the same vector share (each load's buffer, its index
    with the reduction's variable and the rows of one renamed, its type; the reductions' length).
    None for any other kernel (a softmax reading a mask along its row). Kept per kernel: the rules
    ask it of every kernel of a model after each change of the program."""
    try:
        row = analyse(kernel)
    except NotARowReduction:
        return None
    if sizes.is_symbolic(row.row_count) or sizes.is_symbolic(row.reduce_length):
        return None
    moving = {r.var for r in row.rows if r.extent != 1}
    vector, product = set(), False
    for loop in (phase.loop for phase in row.phases if phase.reduces):
        renamed = {**{r.var: ex.const(0) for r in row.rows if r.extent == 1}, loop.var: VECTOR_COLUMN}
        for a in loop.body:
            product = product or (a.op == "sum" and _vector_times_matrix(a.value, loop.var, moving))
            for node in ex.walk(a.value):
                if isinstance(node, loop_ir.Load) and _follows(node, {loop.var}) and not _follows(node, moving):
                    vector.add((node.buffer, tuple(ex.substitute(i, renamed) for i in node.index), node.dtype))
    if not product:
        return None
    return frozenset(vector), row.reduce_length


def _vector_times_matrix(value: ex.Expr, column: str, rows: set[str]) -> bool:
    """Whether ``value`` (what a sum adds for each ``column``) is, casts aside, a factor whose loads
    along the column follow no row times one that reads a load following a row."""
    while isinstance(value, ex.Op) and value.op == "cast":
        value = value.args[0]
    if not (isinstance(value, ex.Op) and value.op == "mul"):
        return False
    sides = [[n for n in ex.walk(arg) if isinstance(n, loop_ir.Load) and _follows(n, {column})] for arg in value.args]
    vector = [loads and not any(_follows(n, rows) for n in loads) for loads in sides]
    matrix = [any(_follows(n, rows) for n in loads) for loads in sides]
    return (vector[0] and matrix[1]) or (vector[1] and matrix[0])


def _follows(load: loop_ir.Load, names: set[str]) -> bool:
    return bool(set().union(*map(ex.free_vars, load.index)) & names) if load.index else False


def estimate_us(kernel: loop_ir.Kernel, target: Target, knobs: Mapping[str, Any]) -> float | None:
    """The row schedule's estimate for ``kernel`` under the pinned knobs; None where it cannot run it
    under one setting."""
    try:
        found, decisions = decide_for_all(kernel, target, knobs)
    except (NotARowReduction, ScheduleError):
        return None
    return cost.estimate_us(as_one(kernel, found), decisions, target)

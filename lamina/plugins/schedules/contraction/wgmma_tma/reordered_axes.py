"""A 16-bit temporary stored with its axes in the order in which a matmul reads it K-major.

The TMA GEMM reads both operands K-major (``operands.view``). Attention's output leaves the
product with the values as (batch, head, position, feature), and the output projection sums
over head and feature together: along its reduction the operand jumps from one head's features
to the next head's, a whole head's positions further on, so the projection would run on the
CUDA cores, at a twentieth of the TMA GEMM's rate. Where such an operand is a temporary that one
kernel writes and only this product reads, this rule stores it with the axes along which the
reduction moves last (batch, position, head, feature): the writer stores each element at its
new place and the product reads it there, along contiguous memory that the TMA reads as it
lies. Unlike a K-major copy (``k_major_operands``) it adds no kernel and no pass over memory.
The temporary's last axis stays last, so the writer stores runs as long as before.
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from lamina.core.ir import expr as ex, loop_ir
from lamina.core.target import Target
from lamina.plugins.fusion import analysis
from lamina.plugins.schedules.contraction.knobs import FORMER_KNOB_NAMES, KNOB_NAMES, PIPELINE_KNOB_NAMES
from lamina.plugins.schedules.contraction.recognise import Contraction, Operand, analyse, contractions
from lamina.plugins.schedules.contraction.schedule import estimate_contraction
from lamina.plugins.schedules.contraction.wgmma_tma import operands
from lamina.plugins.schedules.contraction.wgmma_tma.k_major_operands import tma_reads_with_a_copy
from lamina.plugins.schedules.contraction.wgmma_tma.operands import with_buffer
from lamina.plugins.schedules.contraction.wgmma_tma.setting import ARCH, MIN_UNPINNED_ROWS, pinned_by


class ReorderTmaOperandAxes:
    """Reorders a temporary's axes where the product that reads it can then run on the TMA GEMM
    and the cost model expects it to gain, or wherever the TMA GEMM is pinned (``products =
    wgmma_tma``, or one of its own knobs)."""

    name = "reorder_tma_operand_axes"
    priority = 9
    """Before ``pad_tma_operand_rows`` (8) and ``store_tma_operands_k_major`` (7), which then see
    the operand as the TMA will read it, and before split-K (5) weighs the product."""
    knob_namespace = "contraction"
    knob_names = (*KNOB_NAMES, *PIPELINE_KNOB_NAMES)
    former_knob_names = FORMER_KNOB_NAMES

    def apply(self, program: loop_ir.Program, target: Target, knobs: Mapping[str, Any]) -> loop_ir.Program | None:
        if target.compute_capability != ARCH:
            return None
        temporaries = {b.name: b for b in program.temporaries}
        pinned = pinned_by(knobs)
        untouched = analysis.Untouched()
        result = program
        for _, c in contractions(program):
            kernel = c.kernel
            factors = operands.factors(c)
            if factors is None or c.hinted().extents[c.m] < MIN_UNPINNED_ROWS or not untouched.holds(kernel):
                continue
            for operand in factors:
                buffer = temporaries.get(operand.load.buffer)
                order = None if buffer is None else k_major_order(c, operand)
                writer = None if order is None else _one_writer_and_one_reader(result, buffer.name, kernel.name)
                if writer is None or not untouched.holds(writer):
                    continue
                reordered = with_axes_in_order(result, buffer, order)
                (rewritten,) = [k for k in reordered.kernels if k.name == kernel.name]
                if tma_reads_with_a_copy(analyse(rewritten), target) and (
                        pinned or estimate_contraction(rewritten, target) < estimate_contraction(kernel, target)):
                    untouched.touch(writer, kernel)
                    result = reordered
                    break
        return result if untouched else None


def k_major_order(c: Contraction, operand: Operand) -> tuple[int, ...] | None:
    """The axes of ``operand``'s buffer in the order that puts those the reduction moves along
    last (in their order), those its side moves along before them, and the others first; None
    where that is the order they have, the last axis would move, an axis moves with both, or the
    TMA can read the operand already."""
    if not isinstance(operands.view(c, operand), str):
        return None
    side = c.m if operand.side == "m" else c.n
    first, middle, last = [], [], []
    for axis, position in enumerate(operand.load.index):
        names = ex.free_vars(position)
        if c.reduce_var in names and side in names:
            return None
        (last if c.reduce_var in names else middle if side in names else first).append(axis)
    order = (*first, *middle, *last)
    if order == tuple(range(len(order))) or order[-1] != len(order) - 1:
        return None
    return order


def _one_writer_and_one_reader(program: loop_ir.Program, buffer: str, reader: str) -> loop_ir.Kernel | None:
    """The one kernel that writes ``buffer``, where one does and kernel ``reader`` alone reads it."""
    writers = [k for k in program.kernels if buffer in {b.name for b in k.outputs}]
    readers = [k for k in program.kernels if buffer in analysis.loaded_buffers(k)]
    return writers[0] if len(writers) == 1 and [k.name for k in readers] == [reader] else None


def with_axes_in_order(program: loop_ir.Program, buffer: loop_ir.Buffer, order: tuple[int, ...]) -> loop_ir.Program:
    """``program`` with temporary ``buffer`` laid out with its axes in ``order`` (axis ``order[k]``
    of the old layout is axis ``k`` of the new): its declaration, every store to it and every
    load from it."""
    shape = tuple(buffer.type.shape[a] for a in order)
    unread = buffer.unread
    if unread is not None:
        unread = ex.substitute(unread, {loop_ir.axis_var(a).name: loop_ir.axis_var(k) for k, a in enumerate(order)})
    reordered = attrs.evolve(buffer, type=attrs.evolve(buffer.type, shape=shape), unread=unread)
    program = with_buffer(program, reordered)

    def permuted(index: tuple[ex.Expr, ...]) -> tuple[ex.Expr, ...]:
        return tuple(index[a] for a in order)

    def load(node: ex.Expr) -> ex.Expr | None:
        if isinstance(node, loop_ir.Load) and node.buffer == buffer.name:
            return attrs.evolve(node, index=permuted(tuple(ex.transform(i, load) for i in node.index)))
        return None

    def body(statements: tuple[loop_ir.Stmt, ...]) -> tuple[loop_ir.Stmt, ...]:
        statements = loop_ir.map_expressions(statements, lambda e: ex.transform(e, load))
        return tuple(_stores_permuted(s, buffer.name, permuted) for s in statements)

    def touches(k: loop_ir.Kernel) -> bool:
        return any(b.name == buffer.name for b in k.inputs + k.outputs)

    return attrs.evolve(program, kernels=tuple(attrs.evolve(k, body=body(k.body)) if touches(k) else k
                                               for k in program.kernels))


def _stores_permuted(statement: loop_ir.Stmt, buffer: str, permuted) -> loop_ir.Stmt:
    if isinstance(statement, loop_ir.Loop):
        return attrs.evolve(statement, body=tuple(_stores_permuted(s, buffer, permuted) for s in statement.body))
    if isinstance(statement, loop_ir.Store) and statement.buffer == buffer:
        return attrs.evolve(statement, index=permuted(statement.index))
    return statement

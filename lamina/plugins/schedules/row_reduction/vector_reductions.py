"""A reduction of a decoding step's one row computed in each matrix-vector product that reads it.

At one token a norm reduces one row, the hidden state, to one value (``rsqrt(mean(x * x) + eps)``),
and the projections after it read that value through a broadcast, each row of a product scaling
the same vector by it. As a kernel of its own the norm is one block that every product waits for:
a launch, and a wait for its loads and its store, between the layer's kernels. Each row of a
product reads the whole vector anyway; here it reduces the vector itself first, from the elements
it loads for its product (the row schedule keeps them in registers between its two loops), and the
norm's kernel goes: a few hundred multiply-adds per row more on elements already in registers.

``fuse_reduction_into_consumer`` takes such a reduction only into a consumer whose rows it leaves
parallel and that is no product; this rule takes it into every reader, each recomputing it,
where every reader is a matrix-vector product (``joined.vector_read``) whose reduction runs over as
many elements, nothing between the two kernels writes what the reduction reads, and the cost
model expects the products to take less time than the reduction and the products apart. A row
that computes the norm loads its weights after it, a second wait for memory that every wave of
blocks pays: a product of many waves (TinyLlama's LM head, slower so on an H100:
``experiments/decode_launches/``) keeps the norm a kernel of its own.
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from lamina.core.ir import expr as ex, loop_ir
from lamina.core.ir.expr import Expr
from lamina.core.target import Target
from lamina.plugins.fusion import analysis
from lamina.plugins.schedules.row_reduction.joined import estimate_us, vector_read
from lamina.plugins.schedules.row_reduction.schedule import RowReductionSchedule


class ComputeVectorReductionInEachProduct:
    name = "compute_vector_reduction_in_each_product"
    priority = 48
    """After ``fuse_reduction_into_consumer`` (50) has declined the reduction, before the products
    of one input join (44 on Hopper's tensor cores, 43 for one token's), so that they join with
    it."""
    knob_namespace = "row_reduction"
    knob_names = RowReductionSchedule.knob_names

    def apply(self, program: loop_ir.Program, target: Target, knobs: Mapping[str, Any]) -> loop_ir.Program | None:
        outputs = {b.name for b in program.outputs}
        known = analysis.buffers(program)
        kernels: list[loop_ir.Kernel | None] = list(program.kernels)
        untouched = analysis.Untouched()
        dropped: set[str] = set()
        for position, reduction in enumerate(program.kernels):
            store = _one_value(reduction)
            if store is None or store.buffer in outputs or not untouched.holds(reduction):
                continue
            readers = [k for k in range(position + 1, len(kernels)) if kernels[k] is not None
                       and store.buffer in analysis.loaded_buffers(kernels[k])]
            fused = {k: _computing(reduction, store, kernels[k]) for k in readers
                     if untouched.holds(kernels[k]) and _nothing_between_writes(program, reduction, position, k)}
            if not readers or len(fused) < len(readers) or None in fused.values():
                continue
            fused = {k: analysis.with_exact_inputs(kernel, known) for k, kernel in fused.items()}
            apart = [estimate_us(kernel, target, knobs) for kernel in (reduction, *(kernels[k] for k in readers))]
            together = [estimate_us(kernel, target, knobs) for kernel in fused.values()]
            if None in apart or None in together or sum(together) >= sum(apart):
                continue
            untouched.touch(reduction, *(kernels[k] for k in readers))
            for k, kernel in fused.items():
                kernels[k] = kernel
            kernels[position] = None
            dropped.add(store.buffer)
        if not dropped:
            return None
        return analysis.with_kernels(program, kernels, dropped)


def _one_value(kernel: loop_ir.Kernel) -> loop_ir.Store | None:
    """The store of a kernel that reduces one row to one value: every parallel loop of one point,
    a reduction, and one store of what it reduced."""
    loops, work = analysis.parallel_nest(kernel)
    store = analysis.single_store(kernel)
    if store is None or not work or work[-1] is not store or any(loop.extent != 1 for loop in loops):
        return None
    if not any(isinstance(s, loop_ir.Loop) and s.kind == "reduce" for s in work):
        return None
    return store


def _nothing_between_writes(program: loop_ir.Program, reduction: loop_ir.Kernel, position: int, reader: int) -> bool:
    reads = set(analysis.loaded_buffers(reduction))
    return not any(reads & {b.name for b in k.outputs} for k in program.kernels[position + 1:reader])


def _computing(reduction: loop_ir.Kernel, store: loop_ir.Store, reader: loop_ir.Kernel) -> loop_ir.Kernel | None:
    """``reader`` reducing the row itself, in each of its rows before its own work, and reading the
    value computed there instead of the buffer; None where ``reader`` is no matrix-vector product
    whose reduction runs over as many elements."""
    key = vector_read(reader)
    loops, body = analysis.parallel_nest(reduction)
    own = [s for s in body if isinstance(s, loop_ir.Loop) and s.kind == "reduce"]
    if key is None or any(loop.extent != key[1] for loop in own):
        return None
    reader_loops, reader_body = analysis.parallel_nest(reader)
    taken = analysis.bound_names(reader.body) | {b.name for b in reader.inputs + reader.outputs}
    work = analysis.renamed(body, analysis.fresh_names(analysis.bound_names(body), taken))
    single = {loop.var: ex.const(0) for loop in loops}
    prologue = loop_ir.map_expressions(work[:-1], lambda e: ex.substitute(e, single))
    value = ex.substitute(work[-1].value, single)

    def replace(node: Expr) -> Expr | None:
        if isinstance(node, loop_ir.Load) and node.buffer == store.buffer:
            return ex.cast(value, node.dtype)
        return None

    nest = prologue + loop_ir.map_expressions(reader_body, lambda e: ex.transform(e, replace))
    for loop in reversed(reader_loops):
        nest = (attrs.evolve(loop, body=nest),)
    return analysis.renumbered(attrs.evolve(reader, body=nest))

"""Attention as one kernel: the scores' product, their softmax and the values' product fused.

Decomposed, ``scaled_dot_product_attention`` on 16-bit inputs is three kernels on Hopper: the
scores (a TMA GEMM, its epilogue the scale and mask), the softmax that reads each row of them
and writes the probabilities rounded to 16 bits, and the values' product that reads those
(queries x keys x heads of scores and probabilities through memory, and three launches). Where
the three form a chain that nothing else reads into, this rule has the values' kernel compute
the softmax itself, each loop over the keys computing its score where it read it
(``matmul_row_reduction.computed_where_read``) and the values' sum reading the probability as
the softmax's store computed it. The result is the kernel ``attention.recognise`` describes; the
``attention`` schedule runs it in one pass over the keys. The rule fuses only where that
schedule takes the kernel (bf16 or fp16 operands the TMA can read, on Hopper), so that no other
schedule meets a kernel that computes every score three times, and where the cost model expects
the one kernel to take less than the three (or the schedule's knobs are pinned): with few heads
at a few hundred positions, its blocks leave SMs idle while each walks every key block.
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from lamina.core.errors import ScheduleError
from lamina.core.ir import expr as ex, loop_ir
from lamina.core.ir.expr import Expr
from lamina.core.target import Target
from lamina.plugins.fusion import analysis
from lamina.plugins.schedules.contraction import Contraction, NotAContraction, estimate_contraction
from lamina.plugins.schedules.contraction import analyse as analyse_contraction
from lamina.plugins.fusion.inline_pointwise_producers import TMA_MIN_ROWS
from lamina.plugins.schedules.contraction.wgmma_tma import copy_k_major
from lamina.plugins.schedules.contraction.wgmma_tma.operands import factors, view
from lamina.plugins.schedules.loop_to_kernel import split_parallel_nest
from lamina.plugins.schedules.matmul_row_reduction import computed_where_read
from lamina.plugins.schedules.row_reduction.cost import estimate_cost as row_reduction_cost
from lamina.plugins.schedules.attention import tiling
from lamina.plugins.schedules.attention.recognise import NotAttention, analyse, values_read_as_they_lie


class FuseAttention:
    name = "fuse_attention"
    priority = 6
    """After the values are copied K-major (``store_tma_operands_k_major``, 7); before split-K
    would divide the values' product and the scores' unread elements are marked (5)."""
    knob_namespace = tiling.SCHEDULE_NAME
    knob_names = tiling.KNOB_NAMES

    def apply(self, program: loop_ir.Program, target: Target, knobs: Mapping[str, Any]) -> loop_ir.Program | None:
        if target.compute_capability != tiling.ARCH:
            return None
        temporaries = {b.name for b in program.temporaries}
        known = analysis.buffers(program)
        originals = list(program.kernels)
        kernels = [[k] for k in originals]
        writers, readers = analysis.writers_and_readers(originals)
        taken = set(known) | {k.name for k in program.kernels}
        untouched = analysis.Untouched()
        copies: dict[str, loop_ir.Buffer] = {}
        dropped: set[str] = set()
        for position, values_kernel in enumerate(originals):
            chain = _chain(position, originals, writers, readers, temporaries)
            if chain is None:
                continue
            scores_at, softmax_at, scores, c = chain
            chained = [originals[i] for i in (scores_at, softmax_at, position)]
            if not untouched.holds(*chained):
                continue
            softmax = computed_where_read(c, scores, chained[1])
            values = _values_read_by_the_tma(values_kernel, taken)
            if softmax is None or values is None:
                continue
            copy, values_kernel = values
            fused = values_reading_the_softmax(softmax, values_kernel)
            if fused is None:
                continue
            copied = {b.name: b for b in (copy.outputs if copy is not None else ())}
            fused = analysis.renumbered(analysis.with_exact_inputs(fused, {**known, **copied}))
            try:
                attention = analyse(fused)
                if attention.queries_extent < TMA_MIN_ROWS:
                    continue
                _, fused_us, _ = tiling.choose(attention, target, knobs)
            except (NotAttention, ScheduleError):
                continue
            apart_us = (estimate_contraction(chained[0], target) + row_reduction_cost(chained[1], target)
                        + estimate_contraction(chained[2], target) + tiling.score_reads_us(attention, target))
            if fused_us >= apart_us and not knobs:
                continue
            untouched.touch(*chained)
            kernels[position] = [copy, fused] if copy is not None else [fused]
            kernels[scores_at] = kernels[softmax_at] = []
            copies.update(copied)
            taken |= set(copied) | ({copy.name} if copy is not None else set())
            dropped |= {scores.buffer, chained[1].outputs[0].name}
        if not untouched:
            return None
        fused_program = attrs.evolve(program, kernels=tuple(k for replaced in kernels for k in replaced),
                                     temporaries=program.temporaries + tuple(copies.values()))
        return analysis.without_buffers(fused_program, dropped)


def _values_read_by_the_tma(kernel: loop_ir.Kernel, taken: set[str]):
    """(None, the values' kernel) where the TMA reads its values as they lie (K-major, or along
    whole panels of features: ``values_read_as_they_lie``), else (a kernel that copies them
    K-major, the values' kernel reading the copy); None where neither."""
    try:
        c = analyse_contraction(kernel)
    except NotAContraction:
        return None
    found = factors(c)
    if found is None:
        return None
    found_view = view(c, found[1])
    if not isinstance(found_view, str) and values_read_as_they_lie(found_view, c.extents[c.n]):
        return None, kernel
    return copy_k_major(c, found[1], taken)


def _chain(position: int, kernels, writers, readers, temporaries):
    """(the scores' kernel, the softmax's kernel, the scores' store, the scores' contraction) where
    kernel ``position`` multiplies probabilities that a softmax of a product's rows writes for it
    alone, else None."""
    try:
        values = analyse_contraction(kernels[position])
    except NotAContraction:
        return None
    found = factors(values)
    if found is None or values.slice_bound is not None:
        return None
    probabilities = found[0].load.buffer
    softmax_at = writers.get(probabilities)
    if probabilities not in temporaries or softmax_at is None or readers.get(probabilities) != [position]:
        return None
    softmax = kernels[softmax_at]
    if len(softmax.outputs) != 1:
        return None
    for scores in analysis.loaded_buffers(softmax):
        scores_at = writers.get(scores)
        if scores not in temporaries or scores_at is None or readers.get(scores) != [softmax_at]:
            continue
        store = analysis.single_store(kernels[scores_at])
        if store is None:
            continue
        try:
            c = analyse_contraction(kernels[scores_at])
        except NotAContraction:
            continue
        return scores_at, softmax_at, store, c
    return None


def _probabilities_times_values(kernel: loop_ir.Kernel) -> tuple[Contraction, loop_ir.Load] | None:
    """The values' product as a contraction, and its read of the probabilities."""
    try:
        c = analyse_contraction(kernel)
    except NotAContraction:
        return None
    return c, factors(c)[0].load


def values_reading_the_softmax(softmax: loop_ir.Kernel, values_kernel: loop_ir.Kernel,
                               describe=_probabilities_times_values) -> loop_ir.Kernel | None:
    """The values' kernel over the softmax's rows: the softmax's reductions first, then for each
    feature the values' sum, each term computing its probability as the softmax stored it; None
    where the two do not line up (the values read the probabilities elsewhere than along a row).
    ``describe`` gives the values' product as a contraction and its read of the probabilities."""
    rows, inner = split_parallel_nest(softmax.body)
    if not inner or not isinstance(inner[-1], loop_ir.Loop) or inner[-1].kind != "serial":
        return None
    store_loop = inner[-1]
    if not store_loop.body or not isinstance(store_loop.body[-1], loop_ir.Store):
        return None
    store = store_loop.body[-1]
    substituted = {loop.var for loop in rows} | {store_loop.var}
    taken = analysis.bound_names(softmax.body) - substituted | {b.name for b in softmax.inputs + softmax.outputs}
    renames = analysis.fresh_names(analysis.bound_names(values_kernel.body), taken)
    values_kernel = attrs.evolve(values_kernel, body=analysis.renamed(values_kernel.body, renames))
    described = describe(values_kernel)
    if described is None:
        return None
    c, read = described
    mapping = _rows_in_values(rows, store_loop.var, store, read, c)
    if mapping is None or store_loop.extent != c.reduce_extent:
        return None
    mapping[store_loop.var] = ex.Var(c.reduce_var)

    def moved(body: tuple[loop_ir.Stmt, ...]) -> tuple[loop_ir.Stmt, ...]:
        return loop_ir.map_expressions(body, lambda e: ex.substitute(e, mapping))

    element = moved(store_loop.body[:-1])
    probability = ex.substitute(store.value, mapping)
    summed = ex.transform(c.value, lambda node: probability if node == read else None)
    features = loop_ir.Loop(c.n, c.extents[c.n], "serial", (
        loop_ir.Init(c.acc, c.init),
        loop_ir.Loop(c.reduce_var, c.reduce_extent, "reduce", (*element, loop_ir.Accumulate(c.acc, "sum", summed))),
        *c.epilogue))
    body: tuple[loop_ir.Stmt, ...] = (*moved(inner[:-1]), features)
    loops, _ = split_parallel_nest(values_kernel.body)
    for loop in reversed([loop for loop in loops if loop.var != c.n]):
        body = (attrs.evolve(loop, body=body),)
    return attrs.evolve(values_kernel, body=body)


def _rows_in_values(rows, column: str, store: loop_ir.Store, read: loop_ir.Load,
                    c: Contraction) -> dict[str, Expr] | None:
    """Each softmax row variable as the values' kernel's variable that reads the same row, and
    the softmax's column as the values' reduction; None unless they correspond one to one."""
    parallel = set(c.extents) - {c.reduce_var, c.n}
    mapping: dict[str, Expr] = {}
    for stored, read_at in zip(store.index, read.index):
        if isinstance(stored, ex.Var):
            if stored.name == column:
                if read_at != ex.Var(c.reduce_var):
                    return None
            elif not (isinstance(read_at, ex.Var) and read_at.name in parallel) or stored.name in mapping:
                return None
            else:
                mapping[stored.name] = read_at
        elif stored != read_at:
            return None
    for loop in rows:
        if loop.var not in mapping:
            if loop.extent != 1:
                return None
            mapping[loop.var] = ex.const(0)
    used = {e.name for e in mapping.values() if isinstance(e, ex.Var)}
    if any(c.extents[v] != 1 for v in parallel - used) or column in mapping:
        return None
    return mapping

"""Compute a contraction inside the row reduction that reads its rows: ``softmax(q @ k^T)``.

When a contraction's only reader reduces each row of its result (along the
contraction's columns, the output's contiguous axis) and the rows are short enough for
a block, or a cluster of blocks, to hold in registers, every loop over the row computes
its element, a dot product, where it used to read it. The product then never reaches
memory: the ``matmul_row_reduction`` schedule computes each element once and keeps the row
on chip between the loops. Rows of up to 2048 that no cluster holds go in bands, whose
last block reads the elements back from L2 (``matmul_row_reduction.last_block``). Where the
schedule takes neither, the kernels stay two, the contraction and the row reduction.

A product of two 16-bit operands that Hopper's TMA GEMM can take (as they lie, or one copied
K-major, ``contraction.wgmma_tma.k_major_operands``) stays a kernel of its own there: the
fused kernel multiplies 16-bit operands on the CUDA cores, at a fraction of the tensor cores'
rate, which costs more than the scores' round trip through memory
(``experiments/model_profiles/RESULTS.md``, the cost model's figures for Phi-3's scores).
"""

from __future__ import annotations

import functools
from typing import Any, Mapping

import attrs

from lamina.core.errors import ScheduleError
from lamina.core.ir import expr as ex, loop_ir
from lamina.core.ir.expr import Expr
from lamina.core.ir.names import fresh_name
from lamina.core.target import Target
from lamina.plugins.fusion import analysis
from lamina.plugins.schedules.contraction import FORMER_KNOB_NAMES, KNOB_NAMES, Contraction, NotAContraction
from lamina.plugins.schedules.contraction import analyse as analyse_contraction
from lamina.plugins.schedules.contraction.wgmma_tma import tma_reads_with_a_copy
from lamina.plugins.schedules.matmul_row_reduction import tiling
from lamina.plugins.schedules.matmul_row_reduction.recognise import NotContractionRows, analyse
from lamina.plugins.schedules.loop_to_kernel import split_parallel_nest


class FuseContractionIntoRowReduction:
    name = "fuse_contraction_into_row_reduction"
    priority = 30
    knob_namespace = tiling.SCHEDULE_NAME
    knob_names = (*KNOB_NAMES, tiling.ROW_COMBINE_KNOB)
    former_knob_names = (*FORMER_KNOB_NAMES, *(r.old for r in tiling.RENAMED))

    def apply(self, program: loop_ir.Program, target: Target, knobs: Mapping[str, Any]) -> loop_ir.Program | None:
        """Each product whose one reader takes it computed where read; after the first, every other
        that touches nothing the ones before touched (the next layer's scores) in the same call
        (``analysis.Untouched``)."""
        outputs = {b.name for b in program.outputs}
        kernels: list[loop_ir.Kernel | None] = list(program.kernels)
        pins = tuple(sorted(knobs.items()))
        untouched = analysis.Untouched()
        dropped: set[str] = set()
        for position, producer in enumerate(program.kernels):
            store = analysis.single_store(producer)
            if store is None or store.buffer in outputs:
                continue
            readers = [i for i in range(position + 1, len(kernels))
                       if store.buffer in analysis.loaded_buffers(program.kernels[i])]
            if len(readers) != 1 or not untouched.holds(producer, kernels[readers[0]]):
                continue
            fused = _reader_computing(producer, kernels[readers[0]], target, pins)
            if fused is None:
                continue
            untouched.touch(producer, kernels[readers[0]])
            kernels[readers[0]] = fused
            kernels[position] = None
            dropped.add(store.buffer)
        if not untouched:
            return None
        return analysis.with_kernels(program, kernels, dropped)


@functools.lru_cache(maxsize=1024)
def _reader_computing(producer: loop_ir.Kernel, reader: loop_ir.Kernel, target: Target,
                      pins: tuple) -> loop_ir.Kernel | None:
    """``reader`` computing the product of ``producer`` (its only reader) where it reads it, if the
    schedule takes the result; else None. Kept per pair: the fusion driver asks again after every
    change to the program, and the kernels of a pair that did not fuse are the same objects then."""
    if loop_ir.has_symbolic_sizes(producer):
        return None  # the matmul_row_reduction schedule takes sizes that are numbers
    try:
        c = analyse_contraction(producer)
    except NotAContraction:
        return None
    if tma_reads_with_a_copy(c, target) or c.extents[c.n] > tiling.MAX_FUSED_ROW_LENGTH:
        return None
    fused = computed_where_read(c, analysis.single_store(producer), reader)
    if fused is None:
        return None
    fused = analysis.with_exact_inputs(fused, {b.name: b for b in producer.inputs + reader.inputs})
    try:
        tiling.choose(analyse(fused), target, dict(pins))
    except (NotContractionRows, ScheduleError):
        return None
    return fused


def computed_where_read(c: Contraction, store: loop_ir.Store, consumer: loop_ir.Kernel) -> loop_ir.Kernel | None:
    """The consumer computing the product where it reads it, each loop over a row computing
    its element (a dot product) first, or None where it reads the product otherwise."""
    loops, inner = split_parallel_nest(consumer.body)
    rows = {loop.var for loop in loops}
    taken = analysis.bound_names(consumer.body) | analysis.bound_names(c.kernel.body)
    taken |= {b.name for b in consumer.inputs + consumer.outputs + c.kernel.inputs} - {store.buffer}
    body = []
    for s in inner:
        if not isinstance(s, loop_ir.Loop):
            if any(load.buffer == store.buffer for load in loop_ir.loads((s,))):
                return None
            body.append(s)
            continue
        computed = _computing_its_element(s, c, store, rows, taken)
        if computed is None:
            return None
        body.append(computed)
    for loop in reversed(loops):
        body = [attrs.evolve(loop, body=tuple(body))]
    return attrs.evolve(consumer, body=tuple(body))


def _computing_its_element(loop: loop_ir.Loop, c: Contraction, store: loop_ir.Store, rows: set[str],
                           taken: set[str]) -> loop_ir.Loop | None:
    """``loop`` over the row with the product's element computed first and read from there,
    or None where it reads the product anywhere but at (its row, its column)."""
    reads = {load for load in loop_ir.loads(loop.body) if load.buffer == store.buffer}
    if len(reads) != 1 or loop.kind not in ("reduce", "serial"):
        return None
    (read,) = reads
    coordinates = dict(zip((e.name for e in store.index if isinstance(e, ex.Var)),
                           (e for e, s in zip(read.index, store.index) if isinstance(s, ex.Var))))
    if coordinates.get(c.n) != ex.Var(loop.var) or c.extents[c.n] != loop.extent:
        return None
    for var, e in coordinates.items():
        if var != c.n and not (ex.free_vars(e) <= rows):
            return None
    folded = {var: ex.const(0) for var in c.extents if var not in coordinates and var != c.reduce_var}
    dot = fresh_name(store.buffer, taken)
    k = _fresh_reduce_var(taken)
    mapping: dict[str, Expr] = {**coordinates, **folded, c.reduce_var: ex.Var(k)}
    element = ex.substitute(ex.substitute(store.value, {c.acc: ex.Var(dot, c.acc_dtype)}), mapping)

    def replace(node: Expr) -> Expr | None:
        return ex.cast(element, node.dtype) if node == read else None

    rest = loop_ir.map_expressions(loop.body, lambda e: ex.transform(e, replace))
    total = loop_ir.Loop(k, c.reduce_extent, "reduce",
                         (loop_ir.Accumulate(dot, "sum", ex.substitute(c.value, mapping)),))
    return attrs.evolve(loop, body=(loop_ir.Init(dot, c.init), total) + tuple(rest))


def _fresh_reduce_var(taken: set[str]) -> str:
    n = 0
    while f"r{n}" in taken:
        n += 1
    taken.add(f"r{n}")
    return f"r{n}"

"""A gated MLP's two products in one Hopper GEMM: ``silu(x @ gate.T) * (x @ up.T)`` reads both sums
from registers.

Llama, Qwen, Mistral and Gemma compute their MLP as two linears of the same input and an
activation of the one times the other. After epilogue fusion that is two contraction kernels:
one stores its sum (``up``) for the other, whose epilogue computes ``act(gate) * up`` reading it
back. Here the second takes the first's sum as well: one k-tile of the input feeds both weights'
k-tiles, side by side in one stage, into one wgmma twice as wide, and the epilogue finds each
output's ``gate`` and ``up`` in the same thread's accumulators (``Contraction.paired``). That saves
a launch, the ``up`` round trip through memory, and the second pass over the input; the grid's
blocks are twice the work each. Phi-3 computes both in one linear of twice the width and splits
its output: a pointwise kernel reads the product at each of its points twice, half the width
apart; that kernel becomes the product of both halves of the weight, read a fixed number of rows
apart.

The rule takes a pair only where the 16-bit Hopper GEMM takes the merged kernel (sm_90, bf16 or
fp16 operands the TMA reads as they lie, 64 rows or more at the size hint), no pin keeps another
kind of product or a setting the merged kernel cannot take (no other schedule runs a kernel of
two sums), and the cost model expects the one kernel to beat the two.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import attrs

from lamina.core.errors import ScheduleError
from lamina.core.ir import dtypes, expr as ex, loop_ir, sizes
from lamina.core.ir.expr import Expr
from lamina.core.target import Target
from lamina.plugins.fusion import analysis
from lamina.plugins.schedules.contraction.knobs import FORMER_KNOB_NAMES, KNOB_NAMES, PIPELINE_KNOB_NAMES, WGMMA_TMA
from lamina.plugins.schedules.contraction.recognise import Contraction, NotAContraction, analyse
from lamina.plugins.schedules.contraction.schedule import cheapest_estimate
from lamina.plugins.schedules.contraction.split_k import fusion_rule as split_k
from lamina.plugins.schedules.contraction.wgmma_tma.setting import ARCH, MIN_UNPINNED_ROWS, operands_problem
from lamina.plugins.schedules.loop_to_kernel import split_parallel_nest


class PairGatedProducts:
    name = "pair_gated_products"
    priority = 45
    """Once epilogues are fused (the activation and the product are in the gate's kernel), before the
    rules that store operands for the TMA and split reductions across blocks."""
    knob_namespace = "contraction"
    knob_names = (*KNOB_NAMES, *PIPELINE_KNOB_NAMES)
    former_knob_names = FORMER_KNOB_NAMES

    def apply(self, program: loop_ir.Program, target: Target, knobs: Mapping[str, Any]) -> loop_ir.Program | None:
        if target.compute_capability != ARCH or knobs.get("products", WGMMA_TMA) != WGMMA_TMA:
            return None
        kernels: list[loop_ir.Kernel | None] = list(program.kernels)
        writers, readers = analysis.writers_and_readers(list(program.kernels))
        outputs = {b.name for b in program.outputs}
        buffers = analysis.buffers(program)
        untouched = analysis.Untouched()
        paired: set[str] = set()
        for position, kernel in enumerate(program.kernels):
            for name in _reads(kernel):
                first = writers.get(name)
                if first is None or first >= position or name in outputs or readers.get(name) != [position]:
                    continue
                if not untouched.holds(kernels[first], kernels[position]) or _overwritten(program, first, position):
                    continue
                merged = _merged(program.kernels[first], kernel, name)
                if merged is None or not _gains(merged, (program.kernels[first], kernel), target, knobs):
                    continue
                untouched.touch(program.kernels[first], kernel)
                kernels[position] = analysis.with_exact_inputs(merged, buffers)
                kernels[first] = None
                paired.add(name)
                break
        if not paired:
            return None
        return attrs.evolve(program, kernels=tuple(k for k in kernels if k is not None),
                            temporaries=tuple(b for b in program.temporaries if b.name not in paired))


def _gains(merged: loop_ir.Kernel, apart: tuple[loop_ir.Kernel, ...], target: Target,
           knobs: Mapping[str, Any]) -> bool:
    """Whether the pins let the merged kernel run and the cost model expects it faster than the two,
    each product as split-K would then run it (the merged kernel is never split, and a product
    split across blocks may beat it)."""
    return merged_us(merged, target, knobs) < sum(apart_us(k, target, knobs) for k in apart)


def merged_us(merged: loop_ir.Kernel, target: Target, knobs: Mapping[str, Any]) -> float:
    """The estimate of a kernel of joined products at the setting the schedule would choose; infinite
    where the pins let none run."""
    try:
        return cheapest_estimate(merged, target, knobs).total_us
    except ScheduleError:
        return math.inf


def apart_us(kernel: loop_ir.Kernel, target: Target, knobs: Mapping[str, Any]) -> float:
    """A product's estimate, or a pointwise kernel's: a launch and its bytes at the memory's pace."""
    if analysis.pointwise(kernel) is not None:
        moved = sum(sizes.hint(sizes.numel(b.type.shape)) * b.type.dtype.itemsize for b in kernel.inputs + kernel.outputs)
        return target.launch_us + moved / target.memory_bytes_per_us
    split = None if loop_ir.has_symbolic_sizes(kernel) else split_k.choose(kernel, target, knobs)
    return split.split_us if split is not None else cheapest_estimate(kernel, target, knobs).total_us


def _reads(kernel: loop_ir.Kernel) -> list[str]:
    """The buffers a pointwise kernel reads, or a contraction's epilogue, in order."""
    if analysis.pointwise(kernel) is not None:
        return list(analysis.loaded_buffers(kernel))
    try:
        c = analyse(kernel)
    except NotAContraction:
        return []
    names = [node.buffer for s in c.epilogue for node in ex.walk(s.value) if isinstance(node, loop_ir.Load)]
    return list(dict.fromkeys(names))


def _overwritten(program: loop_ir.Program, first: int, position: int) -> bool:
    """Whether a kernel between the two writes what the first reads: it would then read it later."""
    read = {b.name for b in program.kernels[first].inputs}
    return any(b.name in read for k in program.kernels[first + 1:position] for b in k.outputs)


def _merged(producer: loop_ir.Kernel, consumer: loop_ir.Kernel, buffer: str) -> loop_ir.Kernel | None:
    """The one kernel that computes ``consumer`` with ``producer``'s product inside, where the Hopper
    GEMM takes it; else None."""
    up = _stored_sum(producer, buffer)
    if up is None:
        return None
    merged = (_halves_merged(up, consumer, buffer) if analysis.pointwise(consumer) is not None
              else _beside_merged(up, consumer, buffer))
    if merged is None:
        return None
    try:
        c = analyse(merged, joined=True)
    except NotAContraction:
        return None
    if operands_problem(c) is not None or sizes.hint(c.extents[c.m]) < MIN_UNPINNED_ROWS \
            or any(sizes.hint(c.extents[v]) != 1 for v in c.batch):
        return None
    return analysis.renumbered(merged)


def _stored_sum(kernel: loop_ir.Kernel, buffer: str) -> Contraction | None:
    """The contraction of ``kernel`` where all it does is store its sum (cast or not) into ``buffer``."""
    try:
        c = analyse(kernel)
    except NotAContraction:
        return None
    if c.slice_bound is not None or len(c.epilogue) != 1 or c.epilogue[0].buffer != buffer \
            or any(isinstance(node, loop_ir.Load) for node in ex.walk(c.epilogue[0].value)):
        return None
    return c


def _halves_merged(up: Contraction, consumer: loop_ir.Kernel, buffer: str) -> loop_ir.Kernel | None:
    """A pointwise ``consumer`` that reads the product at each of its points twice, a fixed number of
    columns apart (Phi-3's MLP: one product of twice the width, split into gate and up), computing
    both sums itself: each read becomes the product's sum at the columns it reads."""
    pointwise = analysis.pointwise(consumer)
    reads = list(dict.fromkeys(node for node in ex.walk(pointwise.store.value)
                               if isinstance(node, loop_ir.Load) and node.buffer == buffer))
    (stored,) = up.epilogue
    loops, inner = split_parallel_nest(up.kernel.body)
    identity = tuple(ex.Var(loop.var) for loop in loops)
    if len(reads) != 2 or stored.index != identity or any(len(r.index) != len(identity) for r in reads):
        return None
    taken = analysis.bound_names(consumer.body) | {b.name for b in consumer.inputs + consumer.outputs}
    accs = [f"{up.acc}_{k}" for k in range(2)]
    if set(accs) & taken or up.reduce_var in taken:
        return None
    sums, values = [], {}
    for read, acc in zip(reads, accs):
        at = dict(zip((loop.var for loop in loops), read.index))
        renamed = analysis.renamed((inner[0], inner[1]), {up.acc: acc})
        init, reduce_loop = loop_ir.map_expressions(renamed, lambda e, at=at: ex.substitute(e, at))
        sums.append((init, reduce_loop))
        values[read] = ex.substitute(stored.value, {up.acc: ex.Var(acc, up.acc_dtype)})
    (first_init, first_loop), (second_init, second_loop) = sums
    value = ex.transform(pointwise.store.value, lambda e: values.get(e) if isinstance(e, loop_ir.Load) else None)
    body: tuple[loop_ir.Stmt, ...] = (first_init, second_init,
                                      attrs.evolve(first_loop, body=first_loop.body + second_loop.body),
                                      attrs.evolve(pointwise.store, value=value))
    for loop in reversed(pointwise.loops):
        body = (attrs.evolve(loop, body=body),)
    return attrs.evolve(consumer, inputs=consumer.inputs + up.kernel.inputs, body=body)


def _beside_merged(up: Contraction, consumer: loop_ir.Kernel, buffer: str) -> loop_ir.Kernel | None:
    """``consumer``, a product whose epilogue reads ``buffer`` where its own output lies (a gate's
    kernel reading the up projection), summing ``up``'s product beside its own over the same
    loops, its reads of ``buffer`` replaced by that sum."""
    try:
        gate = analyse(consumer)
    except NotAContraction:
        return None
    if gate.slice_bound is not None:
        return None
    producer = up.kernel
    (stored,) = up.epilogue
    up_loops, up_inner = split_parallel_nest(producer.body)
    gate_loops, gate_inner = split_parallel_nest(consumer.body)
    up_axes, gate_axes = _axes(up_loops), _axes(gate_loops)
    if [loop.extent for loop in up_axes] != [loop.extent for loop in gate_axes] or up.reduce_extent != gate.reduce_extent:
        return None
    taken = analysis.bound_names(consumer.body) | {b.name for b in consumer.inputs + consumer.outputs}
    names = {a.var: b.var for a, b in zip(up_axes, gate_axes)} | {up.reduce_var: gate.reduce_var}
    names[up.acc] = analysis.fresh_names({up.acc}, taken).get(up.acc, up.acc)
    if names.get(up.m) != gate.m or names.get(up.n) != gate.n:
        return None
    single = {loop.var: ex.const(0, dtypes.index) for loop in up_loops if loop not in up_axes}
    at_zero = loop_ir.map_expressions((up_inner[0], up_inner[1], stored), lambda e: ex.substitute(e, single))
    init, reduce_loop, store = analysis.renamed(at_zero, names)
    replaced = _replace_reads(gate_inner[2:], buffer, store)
    if replaced is None:
        return None
    gate_init, gate_reduce = gate_inner[0], gate_inner[1]
    body = (gate_init, init, attrs.evolve(gate_reduce, body=gate_reduce.body + reduce_loop.body), *replaced)
    for loop in reversed(gate_loops):
        body = (attrs.evolve(loop, body=body),)
    return attrs.evolve(consumer, inputs=consumer.inputs + producer.inputs, body=body)


def _axes(loops: tuple[loop_ir.Loop, ...]) -> list[loop_ir.Loop]:
    """The parallel loops of more than one step: a kernel may leave out those of one, reading 0."""
    return [loop for loop in loops if loop.extent != 1]


def _replace_reads(stores: tuple[loop_ir.Stmt, ...], buffer: str,
                   stored: loop_ir.Store) -> tuple[loop_ir.Stmt, ...] | None:
    """``stores`` with each read of ``buffer`` replaced by the value ``stored`` puts there; None where
    one reads it elsewhere than where it was stored."""
    wrong = False

    def replace(node: Expr) -> Expr | None:
        nonlocal wrong
        if isinstance(node, loop_ir.Load) and node.buffer == buffer:
            if node.index != stored.index:
                wrong = True
            return stored.value
        return None

    out = loop_ir.map_expressions(stores, lambda e: ex.transform(e, replace))
    return None if wrong else tuple(out)

"""Products of one input in one Hopper GEMM, side by side along the columns: a layer's query, key
and value projections.

An attention layer projects the same normalised input three times, by its query, key and value
weights, and after epilogue fusion each is a contraction kernel of its own. Where the key and
value heads are few (grouped heads: TinyLlama's 256 columns beside 2048 for the queries) their
kernels fill a fraction of the GPU, and split-K adds a kernel to each; where all three are as wide
(BERT, OPT) each is a launch and a partial last wave. Here the three run as one kernel whose
columns are the three products' side by side (``Contraction.pieces``): every block takes
``block_n`` columns that lie in one of them, copies that product's weight through its own tensor
map and runs that product's epilogue (its bias, its store into heads), while all share the input's
k-tiles and one grid fills the GPU once.

The rule joins, from the first such product on, each later product of the same input that can
run at its place (nothing between them writes what it reads, or reads or writes what it writes,
and it reads nothing the joined products write), where the 16-bit Hopper GEMM runs the joined
kernel (sm_90, bf16 or fp16 operands the TMA reads K-major, column counts a multiple of 64, 64
rows or more at the size hint), no pin keeps another kind of product, and the cost model expects
each product it adds to pay; it keeps the products joined where the cost model expects the joined
kernel to take at most ``JOINED_SHARE`` of their time apart (each as split-K would run it).
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from lamina.core.ir import loop_ir, sizes
from lamina.core.target import Target
from lamina.plugins.fusion import analysis
from lamina.plugins.schedules.contraction.knobs import FORMER_KNOB_NAMES, KNOB_NAMES, PIPELINE_KNOB_NAMES, WGMMA_TMA
from lamina.plugins.schedules.contraction.recognise import Contraction, NotAContraction, analyse
from lamina.plugins.schedules.contraction.wgmma_tma.gated_products import apart_us, merged_us
from lamina.plugins.schedules.contraction.wgmma_tma.setting import ARCH, MIN_UNPINNED_ROWS, operands_problem
from lamina.plugins.schedules.loop_to_kernel import split_parallel_nest

JOINED_SHARE = 0.65
"""The largest share of the products' estimated time apart that the joined kernel may be expected
to take. Where the cost model expected a fifth less (Mistral-7B's and Qwen2.5-7B's projections at
512 tokens, long one-wave kernels) the models ran 4-5 % slower; where it expected 40-50 % less
(TinyLlama, Qwen3, BERT, OPT) 9-13 % faster; between the two nothing was measured, and the bound
keeps to what was (``experiments/joined_projections/``)."""
COLUMN_MULTIPLE = 64
"""Every joined product's columns are a multiple of this: of the smallest block width the joined
kernel takes, so that each block lies in one product."""


class JoinProductsOfOneInput:
    name = "join_products_of_one_input"
    priority = 44
    """After a gated MLP's gate and up projections are paired (``pair_gated_products``), before the
    rules that store operands for the TMA and split reductions across blocks."""
    knob_namespace = "contraction"
    knob_names = (*KNOB_NAMES, *PIPELINE_KNOB_NAMES)
    former_knob_names = FORMER_KNOB_NAMES

    def apply(self, program: loop_ir.Program, target: Target, knobs: Mapping[str, Any]) -> loop_ir.Program | None:
        if target.compute_capability != ARCH or knobs.get("products", WGMMA_TMA) != WGMMA_TMA:
            return None
        buffers = analysis.buffers(program)

        def extend(group: _Group, other: loop_ir.Kernel) -> _Group | None:
            candidate = _joined(group.kernel, other)
            if candidate is None:
                return None
            candidate = analysis.with_exact_inputs(candidate, buffers)
            candidate_us, other_us = merged_us(candidate, target, knobs), apart_us(other, target, knobs)
            if candidate_us >= group.us + other_us:
                return None
            return _Group(candidate, candidate_us, group.apart_us + other_us)

        def start(kernel: loop_ir.Kernel) -> _Group:
            us = apart_us(kernel, target, knobs)
            return _Group(kernel, us, us)

        # each kernel's row operand where it may be a piece: the products that share one may join
        inputs = [_row_operand(c) if c is not None else None for c in map(_plain_product, program.kernels)]
        return analysis.joined_in_order(program, inputs, start, extend,
                                        lambda group: group.us <= JOINED_SHARE * group.apart_us)


@attrs.frozen
class _Group:
    """Products joined so far: their estimate as one kernel, and theirs apart."""

    kernel: loop_ir.Kernel
    us: float
    apart_us: float


def _plain_product(kernel: loop_ir.Kernel) -> Contraction | None:
    """The contraction of ``kernel`` where the joined kernel can take it as a piece: one product of a
    row operand by a column operand the TMA reads K-major, whole multiples of 64 columns known when
    compiling, no batch of its own weights, enough rows for the Hopper GEMM at the size hint."""
    try:
        c = analyse(kernel)
    except NotAContraction:
        return None
    n = c.extents[c.n]
    if c.slice_bound is not None or len(c.operands) != 2 or len(kernel.body) != 1 \
            or not isinstance(n, int) or n % COLUMN_MULTIPLE or operands_problem(c) is not None \
            or sizes.hint(c.extents[c.m]) < MIN_UNPINNED_ROWS:
        return None
    return c


def _row_operand(c: Contraction) -> loop_ir.Load:
    return next(o.load for o in c.operands if o.side == "m")


def _joined(joined: loop_ir.Kernel, other: loop_ir.Kernel) -> loop_ir.Kernel | None:
    """``joined`` with ``other``'s nest after its own, its loop variables and accumulator renamed to
    the first nest's, where the joined kernel is then a contraction of pieces."""
    first_loops, first_inner = split_parallel_nest(joined.body[:1])
    loops, inner = split_parallel_nest(other.body)
    if len(loops) != len(first_loops):
        return None
    names = {a.var: b.var for a, b in zip(loops, first_loops)}
    names[inner[1].var] = first_inner[1].var
    names[inner[0].acc] = first_inner[0].acc
    merged = attrs.evolve(joined, body=joined.body + analysis.renamed(other.body, names),
                          inputs=joined.inputs + tuple(b for b in other.inputs if b not in joined.inputs),
                          outputs=joined.outputs + other.outputs)
    try:
        analyse(merged, joined=True)
    except NotAContraction:
        return None
    return merged

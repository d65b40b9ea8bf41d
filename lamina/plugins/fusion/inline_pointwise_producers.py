"""Inline pointwise producers into their consumers.

A kernel that computes one value per point of its output, with no reduction, is
cheap to recompute: every load of its buffer becomes its stored value at the loaded
point, and the producer and its buffer disappear. This is what removes broadcasts,
views and chains of elementwise ops from memory. A producer whose buffer is a program
output stays, and so does anything containing a reduction, which would otherwise be
recomputed for every use. A producer that would make a consumer too large (see
``analysis.MAX_EXPRESSION_NODES``) stays too.
"""

from __future__ import annotations

import attrs

from lamina.core.ir import expr as ex, loop_ir
from lamina.core.ir.expr import Expr
from lamina.plugins.fusion import analysis


class InlinePointwiseProducers:
    name = "inline_pointwise_producers"
    priority = 200

    def apply(self, program: loop_ir.Program) -> loop_ir.Program | None:
        outputs = {b.name for b in program.outputs}
        known = analysis.buffers(program)
        kernels = list(program.kernels)
        reads = [set(analysis.loaded_buffers(k)) for k in kernels]
        inlined: set[str] = set()
        position = 0
        while position < len(kernels):
            producer = analysis.pointwise(kernels[position])
            buffer = producer.store.buffer if producer else None
            consumers = [] if buffer is None or buffer in outputs else [
                later for later in range(position + 1, len(kernels)) if buffer in reads[later]
            ]
            if not consumers or not all(
                analysis.copies_fit(kernels[later], buffer, producer.store.value) for later in consumers
            ):
                position += 1
                continue
            for later in consumers:
                kernels[later] = analysis.with_exact_inputs(_inline(kernels[later], producer), known)
                reads[later] = set(analysis.loaded_buffers(kernels[later]))
            del kernels[position], reads[position]
            inlined.add(buffer)
        if not inlined:
            return None
        return analysis.without_buffers(attrs.evolve(program, kernels=tuple(kernels)), inlined)


def _inline(consumer: loop_ir.Kernel, producer: analysis.Pointwise) -> loop_ir.Kernel:
    """``consumer`` with every load of the producer's buffer replaced by the producer's value there."""
    buffer = producer.store.buffer
    value = producer.store.value

    def replace(node: Expr) -> Expr | None:
        if isinstance(node, loop_ir.Load) and node.buffer == buffer:
            at = dict(zip(producer.vars, node.index))
            return ex.cast(ex.substitute(value, at), node.dtype)
        return None

    def rewrite(e: Expr, ranges: analysis.Ranges) -> Expr:
        return analysis.simplify_indices(ex.transform(e, replace), ranges)

    return attrs.evolve(consumer, body=analysis.map_with_ranges(consumer.body, rewrite))

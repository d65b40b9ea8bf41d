"""Run a reduction inside the first kernel that reads it, once per point of its result.

``x * rsqrt(mean(x * x, -1, keepdim) + eps) * w`` reads the row sum at ``[i0, 0]``
from every point ``(i0, i1)``: the sum does not move with ``i1``. The consumer's
parallel loops that the read follows (``i0``) stay parallel; inside them the reduction
runs first, once, and the consumer's other loops (``i1``) become serial loops after it
that read the accumulator instead of the buffer::

    for i0 in parallel(S):
      acc0 = 0.0
      for r0 in reduce(H):
        acc0 += x[i0, r0] * x[i0, r0]
      for i1 in serial(H):
        out[i0, i1] = x[i0, i1] * rsqrt(acc0 * (1 / H) + eps) * w[i1]

The same holds when the consumer is itself a reduction (softmax's sum of
``exp(x - max)`` reading the row max), which is how softmax becomes one kernel with
its two reductions one after the other. The reduction is never copied: the consumer
must read it at one index that follows some of its own parallel loops (or, for a
reduction to a single value, be small enough to run as one row), and when later
kernels read it too (or it is a program output) the consumer also stores it, once per
point of those loops, for them to read. A consumer that reduces takes the reduction in
only when none of its loops would turn serial and it is not a contraction: a matmul
reading a norm's sum in its prologue, or another matmul's result in its epilogue
(``silu(a @ w1) * (a @ w2)``), keeps its shape and reads the buffer. A matmul goes only
into a pointwise reader of its own points, so that it stays a matmul with stores after it.
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from lamina.core.ir import expr as ex, loop_ir, sizes
from lamina.core.ir.expr import Expr
from lamina.core.target import Target
from lamina.plugins.fusion import analysis


ONE_BLOCK_POINTS = 16384
"""A reduction to a single value (the norm of a one-token row) goes into a reader of at
most this many points, which then runs as one row: one block's worth of work."""


class FuseReductionIntoConsumer:
    name = "fuse_reduction_into_consumer"
    priority = 50

    def apply(self, program: loop_ir.Program, target: Target, knobs: Mapping[str, Any]) -> loop_ir.Program | None:
        """A reduction with a single reader first: taking it in whole leaves the reader a single
        store, so that it can in turn fuse into its own reader (softmax's sum into the
        normalisation, then the max into both). After the first fusion, every other that touches
        none of the kernels and buffers of those made before (the next layer's) is made in the
        same call (``analysis.Untouched``)."""
        outputs = {b.name for b in program.outputs}
        known = analysis.buffers(program)
        kernels = list(program.kernels)
        reads = [set(analysis.loaded_buffers(k)) for k in kernels]
        candidates = []
        for position, reduction in enumerate(kernels):
            store = None if analysis.pointwise(reduction) else analysis.single_store(reduction)
            readers = [] if store is None else [
                later for later in range(position + 1, len(kernels)) if store.buffer in reads[later]
            ]
            if readers:
                kept = len(readers) > 1 or store.buffer in outputs
                candidates.append((kept, position, store, readers[0]))
        untouched = analysis.Untouched()
        dropped: set[str] = set()
        for kept, position, store, reader in sorted(candidates, key=lambda c: (c[0], c[1])):
            reduction, consumer = kernels[position], kernels[reader]
            if not untouched.holds(reduction, consumer) \
                    or not analysis.copies_fit(consumer, store.buffer, store.value, extra=analysis.nodes(reduction)):
                continue
            fused = _fuse(reduction, store, consumer, kept)
            if fused is None:
                continue
            untouched.touch(reduction, consumer)
            kernels[reader] = analysis.with_exact_inputs(fused, known)
            kernels[position] = None
            if not kept:
                dropped.add(store.buffer)
        if not untouched:
            return None
        return analysis.with_kernels(program, kernels, dropped)


def _fuse(
    reduction: loop_ir.Kernel, store: loop_ir.Store, consumer: loop_ir.Kernel, kept: bool
) -> loop_ir.Kernel | None:
    """The consumer running the reduction once per point of the loops its read follows, or
    None. When the reduction's buffer is ``kept`` the consumer also stores it, once per point."""
    _, work = analysis.parallel_nest(reduction)
    loops, body = analysis.parallel_nest(consumer)
    if not work or work[-1] is not store:
        return None
    at = _read_index(consumer, store.buffer)
    extents = {loop.var: loop.extent for loop in loops}
    shape = reduction.outputs[0].type.shape
    if at is None:
        return None
    follows: dict[str, Expr] = {}
    for stored, read, size in zip(store.index, at, shape):
        if isinstance(stored, ex.Var) and size == 1:
            follows[stored.name] = ex.const(0)
        elif isinstance(stored, ex.Var):
            if not (isinstance(read, ex.Var) and extents.get(read.name) == size):
                return None
            follows[stored.name] = read
    followed = [v.name for v in follows.values() if isinstance(v, ex.Var)]
    if len(set(followed)) != len(followed):
        return None
    points = sizes.numel([loop.extent for loop in loops])
    if not followed and (sizes.is_symbolic(points) or points > ONE_BLOCK_POINTS  # a size known at run time may be large
                         or not any(loop.extent == 1 for loop in loops)):
        return None
    outer = [loop for loop in loops if loop.var in followed or loop.extent == 1]
    rest = [loop for loop in loops if loop not in outer]
    reduce_loops = tuple(s for s in loop_ir.statements(body) if isinstance(s, loop_ir.Loop) and s.kind == "reduce")
    if reduce_loops and (rest or _is_contraction(reduce_loops, set(extents))):
        return None
    own_loops, _ = analysis.parallel_nest(reduction)
    own_reduce_loops = tuple(s for s in work if isinstance(s, loop_ir.Loop) and s.kind == "reduce")
    matmul = _is_contraction(own_reduce_loops, {loop.var for loop in own_loops})
    if matmul and (rest or not all(isinstance(s, loop_ir.Store) for s in body)):
        return None

    taken = analysis.bound_names(consumer.body) | {b.name for b in consumer.inputs + consumer.outputs}
    fresh = analysis.fresh_names(analysis.bound_names(work), taken)
    work = analysis.renamed(work, fresh)
    store = work[-1]
    prologue = loop_ir.map_expressions(work[:-1], lambda e: ex.substitute(e, follows))
    value = ex.substitute(store.value, follows)
    if kept:
        prologue += (loop_ir.Store(store.buffer, tuple(ex.substitute(i, follows) for i in store.index), value),)

    def replace(node: Expr) -> Expr | None:
        if isinstance(node, loop_ir.Load) and node.buffer == store.buffer:
            return ex.cast(value, node.dtype)
        return None

    single = {loop.var: ex.const(0) for loop in outer if loop.extent == 1}
    inner = loop_ir.map_expressions(body, lambda e: ex.substitute(ex.transform(e, replace), single))
    for loop in reversed(rest):
        inner = (loop_ir.Loop(loop.var, loop.extent, "serial", inner),)
    nest = prologue + inner
    for loop in reversed(outer):
        nest = (attrs.evolve(loop, body=nest),)
    nest = analysis.map_with_ranges(nest, analysis.simplify_indices)
    outputs = reduction.outputs + consumer.outputs if kept else consumer.outputs
    return analysis.renumbered(attrs.evolve(consumer, outputs=outputs, body=nest))


def _read_index(consumer: loop_ir.Kernel, buffer: str) -> tuple[Expr, ...] | None:
    """The one index at which the consumer reads ``buffer``, or None when it reads it at several."""
    found = {load.index for load in analysis.kernel_loads(consumer) if load.buffer == buffer}
    return found.pop() if len(found) == 1 else None


def _is_contraction(reduce_loops: tuple[loop_ir.Loop, ...], parallel: set[str]) -> bool:
    """Whether the reduction combines operands of two sides, as a matmul does: one read
    that follows a parallel variable ``m`` and not ``n``, another that follows ``n`` and
    not ``m``. A row reduction reading a mask shared by every batch is not one."""
    for loop in reduce_loops:
        moving = []
        for load in loop_ir.loads(loop.body):
            used = set().union(*(ex.free_vars(i) for i in load.index)) if load.index else set()
            if loop.var in used:
                moving.append(used & parallel)
        if any(a - b and b - a for a in moving for b in moving):
            return True
    return False

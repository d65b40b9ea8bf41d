"""Fuse a pointwise epilogue into the reduction whose result it reads.

``relu(sum(...))``, ``sum(...) * (1 / n)``, ``mm(...).view(b, s, n) + bias``: the
epilogue reads each element of the reduction's result exactly once (at its own point,
transposed, or through a view) and nobody else reads it. The reduction's work then
runs at each point of the epilogue and stores the epilogue's value directly, so its
result never reaches memory. The fused kernel takes the epilogue's name, loops and
place in the program, so that every other buffer the epilogue reads is already written
when it runs. An epilogue that lays the result out anew (a projection's columns split into
heads and features, as attention reads them) is fused with the reduction's loops kept instead
(``epilogue_in_its_layout``). Pointwise producers are left to inlining, which decides whether
they are worth copying.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import attrs

from lamina.core.ir import expr as ex, index, loop_ir
from lamina.core.ir.expr import Expr
from lamina.core.target import Target
from lamina.plugins.fusion import analysis, epilogue_in_its_layout


class FuseEpilogueIntoReduction:
    name = "fuse_epilogue_into_reduction"
    priority = 100

    def apply(self, program: loop_ir.Program, target: Target, knobs: Mapping[str, Any]) -> loop_ir.Program | None:
        outputs = {b.name for b in program.outputs}
        known = analysis.buffers(program)
        kernels = list(program.kernels)
        reads = [set(analysis.loaded_buffers(k)) for k in kernels]
        fused: set[str] = set()
        position = 0
        while position < len(kernels):
            reduction = kernels[position]
            store = None if analysis.pointwise(reduction) else analysis.single_store(reduction)
            buffer = store.buffer if store else None
            consumers = [] if buffer is None or buffer in outputs else [
                later for later in range(position + 1, len(kernels)) if buffer in reads[later]
            ]
            later = consumers[0] if len(consumers) == 1 else None
            epilogue = analysis.pointwise(kernels[later]) if later is not None else None
            at = _visiting_index(epilogue, known[buffer]) if epilogue else None
            fits = epilogue is not None and analysis.copies_fit(kernels[later], buffer, store.value,
                                                                 extra=analysis.nodes(reduction))
            if at is not None and fits and not (analysis.bound_names(analysis.parallel_nest(reduction)[1])
                                                & set(epilogue.vars)):
                fused_kernel = _fuse(reduction, store, epilogue, kernels[later], at)
            elif at is None and fits:
                fused_kernel = epilogue_in_its_layout.fused(reduction, store, epilogue, kernels[later], known[buffer])
            else:
                fused_kernel = None
            if fused_kernel is None:
                position += 1
                continue
            kernels[later] = analysis.with_exact_inputs(fused_kernel, known)
            reads[later] = set(analysis.loaded_buffers(kernels[later]))
            del kernels[position], reads[position]
            fused.add(buffer)
        if not fused:
            return None
        return analysis.without_buffers(attrs.evolve(program, kernels=tuple(kernels)), fused)


def _visiting_index(epilogue: analysis.Pointwise, buffer: loop_ir.Buffer) -> tuple[Expr, ...] | None:
    """The one index at which the epilogue reads ``buffer``, when its points visit every
    element of the buffer exactly once: the identity, a transpose, or a view (the same
    row-major offset, where a loop of extent 1 stands at 0)."""
    found = {load.index for load in loop_ir.loads((epilogue.store,)) if load.buffer == buffer.name}
    if len(found) != 1:
        return None
    (at,) = found
    extents = {loop.var: loop.extent for loop in epilogue.loops}
    shape = buffer.type.shape
    if math.prod(shape) != math.prod(extents.values()):
        return None
    names = [e.name for e in at if isinstance(e, ex.Var)]
    if len(names) == len(at) == len(set(names)) == len(extents) and all(
        extents.get(e.name) == size for e, size in zip(at, shape)
    ):
        return at
    own = tuple(ex.const(0) if extent == 1 else ex.Var(v) for v, extent in extents.items())
    shape_of_epilogue = tuple(extents.values())
    offset = ex.op("sub", index.linearize(at, shape), index.linearize(own, shape_of_epilogue))
    return at if index.simplify(offset, extents) == ex.const(0) else None


def _fuse(
    reduction: loop_ir.Kernel,
    store: loop_ir.Store,
    epilogue: analysis.Pointwise,
    epilogue_kernel: loop_ir.Kernel,
    at: tuple[Expr, ...],
) -> loop_ir.Kernel:
    """The reduction's work done at each point of the epilogue, storing the epilogue's value.

    The reduction's parallel variables become the epilogue's coordinates of the element
    they wrote (``at``); the epilogue's loops of extent 1 become the constant 0.
    """
    folded = {loop.var: ex.const(0) for loop in epilogue.loops if loop.extent == 1}
    loops = tuple(loop for loop in epilogue.loops if loop.extent != 1)
    at = tuple(ex.substitute(e, folded) for e in at)
    renamed = {c.name: e for c, e in zip(store.index, at) if isinstance(c, ex.Var)}
    reduced = ex.substitute(store.value, renamed)

    def replace(node: Expr) -> Expr | None:
        if isinstance(node, loop_ir.Load) and node.buffer == store.buffer:
            return ex.cast(reduced, node.dtype)
        return None

    value = ex.transform(ex.substitute(epilogue.store.value, folded), replace)
    own = tuple(ex.substitute(ex.Var(v), folded) for v in epilogue.vars)
    new_store = loop_ir.Store(epilogue.store.buffer, own, value)

    def rewrite(body: tuple[loop_ir.Stmt, ...]) -> tuple[loop_ir.Stmt, ...]:
        out = []
        for s in body:
            if s is store:
                out.append(new_store)
            elif isinstance(s, loop_ir.Loop):
                out.append(attrs.evolve(s, body=rewrite(s.body)))
            else:
                out.extend(loop_ir.map_expressions((s,), lambda e: ex.substitute(e, renamed)))
        return tuple(out)

    _, inner = analysis.parallel_nest(reduction)
    body = rewrite(inner)
    for loop in reversed(loops):
        body = (attrs.evolve(loop, body=body),)
    body = analysis.map_with_ranges(body, analysis.simplify_indices)
    return attrs.evolve(reduction, name=epilogue_kernel.name, outputs=epilogue_kernel.outputs, body=body)

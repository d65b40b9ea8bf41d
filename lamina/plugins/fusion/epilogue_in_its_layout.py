"""A reduction's epilogue that lays its result out anew, fused with the reduction's loops kept.

``addmm(bias, x, w).view(b, s, heads, d).transpose(1, 2)``: a projection whose epilogue (the bias,
the cast to 16 bits) stores each head's features as attention reads them, (batch, head, position,
feature). The epilogue visits every element of the product once, but through a split of the
columns into heads and features, neither the identity nor a transpose nor a view that
``fuse_epilogue_into_reduction`` adopts the epilogue's loops for; left apart, the product stores
its float32 sums and a second kernel adds the bias, rounds and moves them (a launch, and a float32
pass over the product, for each of a layer's three projections). Fused here, the product keeps
its own loops and stores the epilogue's value where the epilogue would have put it: each of the
epilogue's coordinates is a digit of the product's (``column // 64``, ``column % 64``)::

    kernel query(x, w, bias) -> query[1, 12, 512, 64]:
      for i0 in parallel(512):
        for i1 in parallel(768):
          acc0 = sum over r0 of x[i0, r0] * w[i1, r0]
          query[0, i1 // 64, i0, i1 % 64] = bf16(acc0 + bias[i1])

Only where each coordinate of the epilogue's read is a mixed-radix number of its own loop variables
(strides 1, then the product of the extents below, covering the dimension exactly), so that the
epilogue reads every element once, and at least one coordinate is split into several (a mere
transpose is ``fuse_epilogue_into_reduction``'s to take or leave: attention's output transposed
is left to the attention kernel, which stores it so); where the sizes are known when compiling;
and where the product's last axis stays the stored buffer's last, in runs of its innermost loop,
so that the product's stores stay runs of contiguous memory.
"""

from __future__ import annotations

import attrs

from lamina.core.ir import expr as ex, index, loop_ir
from lamina.core.ir.expr import Expr
from lamina.plugins.fusion import analysis

MIN_RUN = 16
"""Elements of the product's rows that the new layout keeps together at least (a head's 64 features):
shorter runs would scatter the product's stores."""


def digits(at: tuple[Expr, ...], shape: tuple[int, ...], extents: dict[str, int]) -> dict[str, tuple[int, int, int]] | None:
    """For each loop variable of the epilogue that moves: the dimension of the read buffer it is a
    digit of, its place value and its extent, where every coordinate of ``at`` is a mixed-radix
    number of distinct variables covering its dimension exactly; else None."""
    place: dict[str, tuple[int, int, int]] = {}
    for dim, (coordinate, size) in enumerate(zip(at, shape)):
        form = index.affine(coordinate)
        if form.constant != 0:
            return None
        terms = []
        for atom, coefficient in form.terms.items():
            if not isinstance(atom, ex.Var) or atom.name not in extents or coefficient <= 0:
                return None
            if extents[atom.name] > 1:
                terms.append((coefficient, atom.name))
        value = 1
        for coefficient, name in sorted(terms):
            if coefficient != value or name in place:
                return None
            place[name] = (dim, coefficient, extents[name])
            value *= extents[name]
        if value != size:
            return None
    if any(extent > 1 and var not in place for var, extent in extents.items()):
        return None
    return place


def fused(reduction: loop_ir.Kernel, store: loop_ir.Store, epilogue: analysis.Pointwise,
          epilogue_kernel: loop_ir.Kernel, buffer: loop_ir.Buffer) -> loop_ir.Kernel | None:
    """The reduction storing the epilogue's value in the epilogue's buffer, at the place the epilogue
    puts each element, or None where the epilogue does not lay the result out as the module says."""
    loops, _ = analysis.parallel_nest(reduction)
    extents = {loop.var: loop.extent for loop in loops}
    shape = buffer.type.shape
    epilogue_extents = {loop.var: loop.extent for loop in epilogue.loops}
    if not all(isinstance(n, int) for n in (*shape, *extents.values(), *epilogue_extents.values())):
        return None
    if not all(isinstance(c, ex.Var) and extents.get(c.name) == size for c, size in zip(store.index, shape)) \
            or len(store.index) != len(shape):
        return None
    reads = {load.index for load in loop_ir.loads((epilogue.store,)) if load.buffer == buffer.name}
    if len(reads) != 1:
        return None
    (at,) = reads
    place = digits(at, shape, epilogue_extents)
    if place is None or not _splits_a_coordinate(place) or not _keeps_rows(place, epilogue, shape):
        return None
    recovered: dict[str, Expr] = {var: ex.const(0) for var, extent in epilogue_extents.items() if extent == 1}
    for var, (dim, value, extent) in place.items():
        digit = store.index[dim]
        if value > 1:
            digit = ex.op("floordiv", digit, ex.const(value))
        if value * extent < shape[dim]:
            digit = ex.op("mod", digit, ex.const(extent))
        recovered[var] = digit

    def replace(node: Expr) -> Expr | None:
        if isinstance(node, loop_ir.Load) and node.buffer == buffer.name:
            return ex.cast(store.value, node.dtype)
        return None

    # the epilogue's variables first: the reduction's value names the reduction's own, which may share their names
    value = ex.transform(ex.substitute(epilogue.store.value, recovered), replace)
    at_new = tuple(ex.substitute(i, recovered) for i in epilogue.store.index)
    new_store = loop_ir.Store(epilogue.store.buffer, at_new, value)

    def rewrite(body: tuple[loop_ir.Stmt, ...]) -> tuple[loop_ir.Stmt, ...]:
        return tuple(new_store if s is store else attrs.evolve(s, body=rewrite(s.body))
                     if isinstance(s, loop_ir.Loop) else s for s in body)

    body = analysis.map_with_ranges(rewrite(reduction.body), analysis.simplify_indices)
    return attrs.evolve(reduction, name=epilogue_kernel.name, outputs=epilogue_kernel.outputs, body=body)


def _splits_a_coordinate(place: dict[str, tuple[int, int, int]]) -> bool:
    dims = [dim for dim, _, _ in place.values()]
    return len(set(dims)) < len(dims)


def _keeps_rows(place: dict[str, tuple[int, int, int]], epilogue: analysis.Pointwise, shape: tuple[int, ...]) -> bool:
    """Whether the digit of the product's last axis with place value 1 is the epilogue's innermost moving
    loop and its stored buffer's last coordinate, over at least ``MIN_RUN`` elements."""
    moving = [loop.var for loop in epilogue.loops if loop.extent > 1]
    if not moving or not epilogue.store.index:
        return False
    innermost = moving[-1]
    dim, value, extent = place.get(innermost, (None, 0, 0))
    return (dim == len(shape) - 1 and value == 1 and extent >= MIN_RUN
            and epilogue.store.index[-1] == ex.Var(innermost))

"""What a pointwise kernel is, and which of its memory accesses can be vector accesses.

A pointwise kernel is a nest of parallel loops around stores only: every output
element is computed on its own, from loads, with no reduction and no accumulator.

A thread owns ``width`` adjacent elements along the innermost loop ``inner``, the
first of them at a multiple of ``width``. An access ``buffer[index]`` reads (or
writes) those elements as one vector exactly when its row-major offset grows by one
with ``inner``, everything else in the offset is a multiple of ``width`` (so the
vector is aligned), and the buffer's rows hold a whole number of vectors. A broadcast
operand such as ``w[i1]`` qualifies; a transposed or gathered one does not, and neither
does a load that only some elements evaluate (a branch of ``where``): it stays one
scalar load per element.
"""

from __future__ import annotations

from typing import Iterator

import attrs

from lamina.core.ir import expr as ex, index, loop_ir
from lamina.core.ir.expr import Expr
from lamina.plugins.schedules.loop_to_kernel import split_parallel_nest

VECTOR_BYTES = 16
"""The widest access one instruction makes."""


@attrs.frozen
class PointwiseNest:
    loops: tuple[loop_ir.Loop, ...] = attrs.field(converter=tuple)
    stores: tuple[loop_ir.Store, ...] = attrs.field(converter=tuple)

    @property
    def inner(self) -> str:
        return self.loops[-1].var

    @property
    def inner_extent(self) -> int:
        return self.loops[-1].extent


def pointwise_nest(kernel: loop_ir.Kernel) -> PointwiseNest | None:
    """The kernel's parallel loops and stores, or None when it is not a pointwise kernel."""
    loops, inner = split_parallel_nest(kernel.body)
    if not loops or not inner or not all(isinstance(s, loop_ir.Store) for s in inner):
        return None
    return PointwiseNest(loops, inner)


def loads(value: Expr, include_conditional: bool = True) -> Iterator[loop_ir.Load]:
    """The loads of ``value``, outermost first, not those inside another load's index;
    without ``include_conditional`` only those evaluated for every element (not in a
    branch of ``where`` nor on the right of ``and``/``or``)."""
    if isinstance(value, loop_ir.Load):
        yield value
        return
    children = value.children()
    if not include_conditional and isinstance(value, ex.Op) and value.op in ("where", "and", "or"):
        children = children[:1]
    for child in children:
        yield from loads(child, include_conditional)


def is_contiguous(kernel: loop_ir.Kernel, buffer: str, idx: tuple[Expr, ...], inner: str) -> bool:
    """Whether ``buffer[idx]`` moves by exactly one element when ``inner`` does, without
    reading another buffer to find its place."""
    if any(isinstance(node, loop_ir.Load) for e in idx for node in ex.walk(e)):
        return False
    offset = index.linearize(idx, kernel.buffer(buffer).type.shape)
    return index.coefficient(offset, inner) == 1


def is_vector_access(kernel: loop_ir.Kernel, buffer: str, idx: tuple[Expr, ...], inner: str, width: int) -> bool:
    """Whether ``buffer[idx]`` of ``width`` adjacent elements from a multiple of ``width``
    along ``inner`` is one aligned vector of the buffer."""
    shape = kernel.buffer(buffer).type.shape
    if width < 2 or not shape or shape[-1] % width or not is_contiguous(kernel, buffer, idx, inner):
        return False
    form = index.affine(index.linearize(idx, shape))
    others = [coef for atom, coef in form.terms.items() if not (isinstance(atom, ex.Var) and atom.name == inner)]
    return form.constant % width == 0 and all(coef % width == 0 for coef in others)


@attrs.frozen
class AccessPlan:
    """The distinct loads and the stores of a pointwise kernel, split into vector and
    scalar accesses for one vector width."""

    width: int
    vector_loads: tuple[loop_ir.Load, ...] = attrs.field(converter=tuple)
    scalar_loads: tuple[loop_ir.Load, ...] = attrs.field(converter=tuple)
    vector_stores: tuple[loop_ir.Store, ...] = attrs.field(converter=tuple)
    scalar_stores: tuple[loop_ir.Store, ...] = attrs.field(converter=tuple)

    @property
    def has_vectors(self) -> bool:
        return bool(self.vector_loads or self.vector_stores)


def plan_accesses(kernel: loop_ir.Kernel, nest: PointwiseNest, width: int) -> AccessPlan:
    every = _distinct(load for s in nest.stores for load in loads(s.value))
    unconditional = set(_distinct(load for s in nest.stores for load in loads(s.value, include_conditional=False)))
    vector_loads = tuple(
        load for load in every
        if load in unconditional and is_vector_access(kernel, load.buffer, load.index, nest.inner, width)
    )
    vector_stores = tuple(s for s in nest.stores if is_vector_access(kernel, s.buffer, s.index, nest.inner, width))
    return AccessPlan(
        width=width,
        vector_loads=vector_loads,
        scalar_loads=tuple(load for load in every if load not in vector_loads),
        vector_stores=vector_stores,
        scalar_stores=tuple(s for s in nest.stores if s not in vector_stores),
    )


def contiguous_itemsizes(kernel: loop_ir.Kernel, nest: PointwiseNest) -> tuple[list[int], list[int]]:
    """The element sizes of the contiguous stores, and of the contiguous loads every element makes."""
    stores = [kernel.buffer(s.buffer).type.dtype.itemsize for s in nest.stores
              if is_contiguous(kernel, s.buffer, s.index, nest.inner)]
    found = [load for s in nest.stores for load in loads(s.value, include_conditional=False)]
    reads = [kernel.buffer(load.buffer).type.dtype.itemsize for load in found
             if is_contiguous(kernel, load.buffer, load.index, nest.inner)]
    return stores, reads


def _distinct(found) -> tuple[loop_ir.Load, ...]:
    return tuple(dict.fromkeys(found))

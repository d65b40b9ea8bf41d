"""What a pointwise kernel is, and which of its memory accesses can be vector accesses.

A pointwise kernel is a nest of parallel loops around stores only: every output
element is computed on its own, from loads, with no reduction and no accumulator.

A thread owns ``width`` adjacent elements along the innermost loop ``inner``, the
first of them at a multiple of ``width``. An access ``buffer[index]`` reads (or
writes) those elements as one vector exactly when its row-major offset moves by one
from lane to lane and starts at a multiple of ``width`` in every vector (``lanes``
proves both, through remainders that do not wrap inside a vector). A broadcast
operand such as ``w[i1]`` qualifies, and so does RoPE's rotated half ``x[..., i3 % 64
+ 64]`` when ``width`` divides 64; a transposed or gathered one does not.

A load in a branch of ``where`` is a vector too when the condition is the same for
every lane (``i3 < 64``). It is loaded only where that branch is taken: one 16-byte
load per vector rather than one per branch (three for a ``cat`` of three). Loading
every branch would be as safe, since Loop IR keeps every index in bounds whether its
branch is taken or not, but it issues more loads and holds more registers for nothing.
Under a condition that differs between lanes, or on the right of ``and``/``or``, a
load stays one scalar load per element.

A store that keeps its element where a condition does not hold, ``b[i] = where(c, v, b[i])``
(a cache written at a position that may lie outside it), is a store made only where ``c``
holds (``kept_where_not``): the element is not read back, and the loads of ``v`` are made for
every element, so that they are in flight with the loads ``c`` waits for (the cache's position).
"""

from __future__ import annotations

from typing import Iterator

import attrs

from lamina.core.ir import expr as ex, index, loop_ir
from lamina.core.ir.expr import Expr
from lamina.plugins.schedules.loop_to_kernel import split_parallel_nest
from lamina.plugins.schedules.pointwise.lanes import is_uniform, lane_form

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


def unconditional_loads(value: Expr) -> Iterator[loop_ir.Load]:
    """The loads of ``value`` that every element makes (not in a branch of ``where`` nor
    on the right of ``and``/``or``), outermost first, not those inside another load's index."""
    if isinstance(value, loop_ir.Load):
        yield value
        return
    children = value.children()
    if isinstance(value, ex.Op) and value.op in ("where", "and", "or"):
        children = children[:1]
    for child in children:
        yield from unconditional_loads(child)


def kept_where_not(store: loop_ir.Store, inner: str, width: int) -> Expr | None:
    """``c`` where ``store`` is ``b[i] = where(c, v, b[i])`` and ``c`` is the same in every lane
    of a vector: the store is then made only where ``c`` holds, of ``v``."""
    value = store.value
    if not (isinstance(value, ex.Op) and value.op == "where"):
        return None
    condition, _, kept = value.args
    if not (isinstance(kept, loop_ir.Load) and kept.buffer == store.buffer and kept.index == store.index):
        return None
    return condition if is_uniform(condition, inner, width) else None


def stored_value(store: loop_ir.Store, inner: str, width: int) -> Expr:
    """What ``store`` writes where it is made (``v`` of a store ``kept_where_not``)."""
    return store.value if kept_where_not(store, inner, width) is None else store.value.args[1]


def is_contiguous(kernel: loop_ir.Kernel, buffer: str, idx: tuple[Expr, ...], inner: str) -> bool:
    """Whether ``buffer[idx]`` moves by exactly one element when ``inner`` does, reading another
    buffer to find its place only where that read is the same for every element along ``inner``
    (a cache written at a loaded position)."""
    if any(isinstance(node, loop_ir.Load) and inner in ex.free_vars(node) for e in idx for node in ex.walk(e)):
        return False
    offset = index.linearize(idx, kernel.buffer(buffer).type.shape)
    return index.coefficient(offset, inner) == 1


def is_vector_access(kernel: loop_ir.Kernel, buffer: str, idx: tuple[Expr, ...], inner: str, width: int) -> bool:
    """Whether ``buffer[idx]`` of ``width`` adjacent elements from a multiple of ``width``
    along ``inner`` is one aligned vector of the buffer."""
    shape = kernel.buffer(buffer).type.shape
    if width < 2 or not shape or shape[-1] % width:
        return False
    form = lane_form(index.linearize(idx, shape), inner, width)
    return form is not None and form.step == 1 and form.is_aligned_to(width)


@attrs.frozen
class Branch:
    """One side of a ``where`` whose condition is the same for every lane: the side
    taken where ``condition`` holds (``taken``) or where it does not."""

    condition: Expr
    taken: bool


Guard = tuple[Branch, ...]
"""Branches that must all be taken for a load to be made; empty for every element."""


def _guarded_loads(value: Expr, inner: str, width: int, guard: Guard | None = ()):
    """Each load of ``value`` with the branches it sits under, None under one that
    cannot be decided once per vector."""
    if isinstance(value, loop_ir.Load):
        yield value, guard
        return
    if isinstance(value, ex.Op) and value.op == "where":
        condition, then, otherwise = value.args
        yield from _guarded_loads(condition, inner, width, guard)
        uniform = guard is not None and is_uniform(condition, inner, width)
        for branch, taken in ((then, True), (otherwise, False)):
            yield from _guarded_loads(branch, inner, width, guard + (Branch(condition, taken),) if uniform else None)
        return
    children = value.children()
    if isinstance(value, ex.Op) and value.op in ("and", "or"):
        yield from _guarded_loads(children[0], inner, width, guard)
        yield from _guarded_loads(children[1], inner, width, None)
        return
    for child in children:
        yield from _guarded_loads(child, inner, width, guard)


def load_guards(nest: PointwiseNest, width: int) -> dict[loop_ir.Load, Guard | None]:
    """Each distinct load with the one guard under which a vector of it can be loaded:
    empty where some element always makes it, None where no single guard serves."""
    found: dict[loop_ir.Load, set[Guard | None]] = {}
    for store in nest.stores:
        condition = kept_where_not(store, nest.inner, width)
        values = (store.value,) if condition is None else (condition, store.value.args[1])
        for value in values:
            for load, guard in _guarded_loads(value, nest.inner, width):
                found.setdefault(load, set()).add(guard)
    guards: dict[loop_ir.Load, Guard | None] = {}
    for load, options in found.items():
        if () in options:
            guards[load] = ()
        elif len(options) == 1:
            (guards[load],) = options
        else:
            guards[load] = None
    return guards


def uniform_conditions(nest: PointwiseNest, width: int) -> tuple[Expr, ...]:
    """The conditions of ``where`` that are the same for every lane, outermost first; one
    inside another such condition is evaluated with it and not listed."""
    found: list[Expr] = []

    def visit(value: Expr) -> None:
        if isinstance(value, loop_ir.Load):
            return
        children = value.children()
        if isinstance(value, ex.Op) and value.op == "where" and is_uniform(children[0], nest.inner, width):
            found.append(children[0])
            children = children[1:]
        for child in children:
            visit(child)

    for store in nest.stores:
        condition = kept_where_not(store, nest.inner, width)
        if condition is not None:
            found.append(condition)
        visit(stored_value(store, nest.inner, width))
    return tuple(dict.fromkeys(found))


@attrs.frozen
class AccessPlan:
    """The distinct loads and the stores of a pointwise kernel, split into vector and
    scalar accesses for one vector width, with the branches each guarded vector load
    is made under and the conditions evaluated once per vector."""

    width: int
    vector_loads: tuple[loop_ir.Load, ...] = attrs.field(converter=tuple)
    scalar_loads: tuple[loop_ir.Load, ...] = attrs.field(converter=tuple)
    vector_stores: tuple[loop_ir.Store, ...] = attrs.field(converter=tuple)
    scalar_stores: tuple[loop_ir.Store, ...] = attrs.field(converter=tuple)
    guards: tuple[tuple[loop_ir.Load, Guard], ...] = attrs.field(converter=tuple, default=())
    conditions: tuple[Expr, ...] = attrs.field(converter=tuple, default=())
    kept: tuple[tuple[loop_ir.Store, Expr], ...] = attrs.field(converter=tuple, default=())
    """Each store made only where its condition holds (``kept_where_not``), with the condition."""

    @property
    def has_vectors(self) -> bool:
        return bool(self.vector_loads or self.vector_stores)

    @property
    def scalar_accesses(self) -> int:
        return len(self.scalar_loads) + len(self.scalar_stores)

    def guard(self, load: loop_ir.Load) -> Guard:
        return dict(self.guards).get(load, ())

    def kept_where_not(self, store: loop_ir.Store) -> Expr | None:
        return dict(self.kept).get(store)


def plan_accesses(kernel: loop_ir.Kernel, nest: PointwiseNest, width: int) -> AccessPlan:
    guards = load_guards(nest, width)
    vector_loads = tuple(
        load for load, guard in guards.items()
        if guard is not None and is_vector_access(kernel, load.buffer, load.index, nest.inner, width)
    )
    vector_stores = tuple(s for s in nest.stores if is_vector_access(kernel, s.buffer, s.index, nest.inner, width))
    kept = tuple((s, c) for s in nest.stores if (c := kept_where_not(s, nest.inner, width)) is not None)
    return AccessPlan(
        width=width,
        vector_loads=vector_loads,
        scalar_loads=tuple(load for load in guards if load not in vector_loads),
        vector_stores=vector_stores,
        scalar_stores=tuple(s for s in nest.stores if s not in vector_stores),
        guards=tuple((load, guards[load]) for load in vector_loads if guards[load]),
        conditions=uniform_conditions(nest, width) if width > 1 else tuple(dict.fromkeys(c for _, c in kept)),
        kept=kept,
    )


def contiguous_itemsizes(kernel: loop_ir.Kernel, nest: PointwiseNest) -> tuple[list[int], list[int]]:
    """The element sizes of the contiguous stores, and of the contiguous loads every element makes."""
    stores = [kernel.buffer(s.buffer).type.dtype.itemsize for s in nest.stores
              if is_contiguous(kernel, s.buffer, s.index, nest.inner)]
    found = [load for s in nest.stores for load in unconditional_loads(stored_value(s, nest.inner, 1))]
    reads = [kernel.buffer(load.buffer).type.dtype.itemsize for load in found
             if is_contiguous(kernel, load.buffer, load.index, nest.inner)]
    return stores, reads


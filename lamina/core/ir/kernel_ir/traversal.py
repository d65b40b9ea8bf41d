"""Walking Kernel IR: every statement of a body, the expressions of a statement, renaming a
kernel's arrays (and tensor maps), and giving its sizes known only at run time their values."""

from __future__ import annotations

from typing import Callable, Iterator, Mapping

import attrs

from lamina.core.errors import InputMismatchError
from lamina.core.ir import expr as ex, index, sizes
from lamina.core.ir.expr import Expr
from lamina.core.ir.kernel_ir.hopper import ClusterLoad, Wgmma
from lamina.core.ir.kernel_ir.hopper_barriers import MbarrierArrive, MbarrierInit, MbarrierWait
from lamina.core.ir.kernel_ir.hopper_tma import TmaLoad, TmaStore
from lamina.core.ir.kernel_ir.nodes import (
    AtomicAdd,
    Assign,
    CpAsync,
    Declare,
    Divergent,
    For,
    If,
    Kernel,
    Load,
    Mma16,
    MmaTf32,
    Stmt,
    Store,
    VectorLoad,
    VectorStore,
)


def statements(body: tuple[Stmt, ...]) -> Iterator[Stmt]:
    for s in body:
        yield s
        if isinstance(s, For):
            yield from statements(s.body)
        elif isinstance(s, If):
            yield from statements(s.then)
            yield from statements(s.orelse)
        elif isinstance(s, Divergent):
            yield from statements(s.body)


def expressions(s: Stmt) -> tuple[Expr, ...]:
    if isinstance(s, Declare):
        return (s.init,) if s.init is not None else ()
    if isinstance(s, Assign):
        return (s.value,)
    if isinstance(s, Store):
        return s.index + (s.value,)
    if isinstance(s, For):
        return (s.start, s.stop)
    if isinstance(s, If):
        return (s.cond,)
    if isinstance(s, Divergent):
        return (s.group,)
    if isinstance(s, CpAsync):
        return s.dst_index + s.src_index + ((s.predicate,) if s.predicate is not None else ())
    if isinstance(s, (VectorLoad, VectorStore)):
        return s.dst_index + s.src_index
    if isinstance(s, (MmaTf32, Mma16)):
        return tuple(i for place in s.acc_index for i in place) + s.a + s.b
    if isinstance(s, MbarrierInit):
        return s.index
    if isinstance(s, MbarrierArrive):
        return s.index + ((s.rank,) if s.rank is not None else ())
    if isinstance(s, MbarrierWait):
        return s.index + (s.parity,)
    if isinstance(s, TmaLoad):
        return s.dst_index + (s.row, s.column) + s.barrier_index
    if isinstance(s, TmaStore):
        return (s.row, s.column) + s.src_index
    if isinstance(s, Wgmma):
        a_values = s.a if isinstance(s.a, tuple) else ()
        return tuple(i for place in s.acc_index for i in place) + a_values + s.a_index + s.b_index
    if isinstance(s, AtomicAdd):
        return s.dst_index + (s.index, s.value)
    return ()


def map_body(body: tuple[Stmt, ...], expression: Callable[[Expr], Expr],
             mapping: Mapping[str, str], touched: Callable[[Stmt], bool] | None = None) -> tuple[Stmt, ...]:
    """``body`` with every expression rewritten by ``expression`` and arrays renamed by ``mapping``;
    a statement for which ``touched`` says False is kept as it is, with what it holds."""
    out = []
    for s in body:
        if touched is not None and not touched(s):
            pass
        elif isinstance(s, For):
            s = attrs.evolve(s, start=expression(s.start), stop=expression(s.stop),
                             body=map_body(s.body, expression, mapping, touched))
        elif isinstance(s, If):
            s = attrs.evolve(s, cond=expression(s.cond), then=map_body(s.then, expression, mapping, touched),
                             orelse=map_body(s.orelse, expression, mapping, touched))
        elif isinstance(s, Divergent):
            s = attrs.evolve(s, group=expression(s.group), body=map_body(s.body, expression, mapping, touched))
        elif isinstance(s, Declare) and s.init is not None:
            s = attrs.evolve(s, init=expression(s.init))
        elif isinstance(s, Assign):
            s = attrs.evolve(s, value=expression(s.value))
        elif isinstance(s, Store):
            s = attrs.evolve(s, array=mapping.get(s.array, s.array), index=tuple(map(expression, s.index)),
                             value=expression(s.value))
        elif isinstance(s, CpAsync):
            s = attrs.evolve(
                s, dst=mapping.get(s.dst, s.dst), src=mapping.get(s.src, s.src),
                dst_index=tuple(map(expression, s.dst_index)), src_index=tuple(map(expression, s.src_index)),
                predicate=None if s.predicate is None else expression(s.predicate),
            )
        elif isinstance(s, (VectorLoad, VectorStore)):
            s = attrs.evolve(
                s, dst=mapping.get(s.dst, s.dst), src=mapping.get(s.src, s.src),
                dst_index=tuple(map(expression, s.dst_index)), src_index=tuple(map(expression, s.src_index)),
            )
        elif isinstance(s, (MmaTf32, Mma16)):
            s = attrs.evolve(
                s, acc=mapping.get(s.acc, s.acc), acc_index=[tuple(map(expression, i)) for i in s.acc_index],
                a=tuple(map(expression, s.a)), b=tuple(map(expression, s.b)),
            )
        elif isinstance(s, MbarrierInit):
            s = attrs.evolve(s, barrier=mapping.get(s.barrier, s.barrier), index=tuple(map(expression, s.index)))
        elif isinstance(s, MbarrierArrive):
            s = attrs.evolve(s, barrier=mapping.get(s.barrier, s.barrier), index=tuple(map(expression, s.index)),
                             rank=None if s.rank is None else expression(s.rank))
        elif isinstance(s, MbarrierWait):
            s = attrs.evolve(s, barrier=mapping.get(s.barrier, s.barrier), index=tuple(map(expression, s.index)),
                             parity=expression(s.parity))
        elif isinstance(s, TmaLoad):
            s = attrs.evolve(s, dst=mapping.get(s.dst, s.dst), dst_index=tuple(map(expression, s.dst_index)),
                             tensor_map=mapping.get(s.tensor_map, s.tensor_map), row=expression(s.row),
                             column=expression(s.column), barrier=mapping.get(s.barrier, s.barrier),
                             barrier_index=tuple(map(expression, s.barrier_index)))
        elif isinstance(s, TmaStore):
            s = attrs.evolve(s, tensor_map=mapping.get(s.tensor_map, s.tensor_map), row=expression(s.row),
                             column=expression(s.column), src=mapping.get(s.src, s.src),
                             src_index=tuple(map(expression, s.src_index)))
        elif isinstance(s, Wgmma):
            s = attrs.evolve(
                s, acc=mapping.get(s.acc, s.acc), acc_index=[tuple(map(expression, i)) for i in s.acc_index],
                a=mapping.get(s.a, s.a) if isinstance(s.a, str) else tuple(map(expression, s.a)),
                a_index=tuple(map(expression, s.a_index)),
                b=mapping.get(s.b, s.b), b_index=tuple(map(expression, s.b_index)),
            )
        elif isinstance(s, AtomicAdd):
            s = attrs.evolve(s, dst=mapping.get(s.dst, s.dst), dst_index=tuple(map(expression, s.dst_index)),
                             array=mapping.get(s.array, s.array), index=expression(s.index),
                             value=expression(s.value))
        out.append(s)
    return tuple(out)


def rename_arrays(kernel: Kernel, mapping: dict[str, str], name: str | None = None) -> Kernel:
    """The same kernel with arrays (parameters, shared and register arrays) renamed by
    ``mapping``, and the kernel itself renamed to ``name`` if given."""
    mapping = {old: new for old, new in mapping.items() if old != new}
    loading = _loading(kernel, frozenset(mapping))

    def rename_expr(e: Expr) -> Expr:
        if id(e) not in loading:
            return e
        children = e.children()
        if children:
            renamed = tuple([rename_expr(c) for c in children])
            if any(new is not old for new, old in zip(renamed, children)):
                e = e.rebuild(renamed)
        if isinstance(e, (Load, ClusterLoad)) and e.array in mapping:
            e = attrs.evolve(e, array=mapping[e.array])
        return e

    return attrs.evolve(
        kernel,
        name=kernel.name if name is None else name,
        params=tuple(attrs.evolve(p, name=mapping.get(p.name, p.name)) for p in kernel.params),
        arrays=tuple(attrs.evolve(a, name=mapping.get(a.name, a.name)) for a in kernel.arrays),
        body=map_body(kernel.body, rename_expr, mapping, lambda s: id(s) in loading),
        tensor_maps=tuple(attrs.evolve(m, name=mapping.get(m.name, m.name), param=mapping.get(m.param, m.param))
                          for m in kernel.tensor_maps),
    )


def _loading(kernel: Kernel, arrays: frozenset[str]) -> set[int]:
    """The statements and expressions of ``kernel`` (by identity) that name one of ``arrays`` or
    load one somewhere inside: the only ones a renaming rebuilds. Kept for the last kernels asked
    about: a model's layers rename the same lowered kernel once each, and most of its statements and
    expression nodes (an attention kernel's tens of thousands) use registers and shared arrays that
    keep their names."""
    key = (id(kernel), arrays)
    found = _loading_kept.get(key)
    if found is not None and found[0] is kernel:
        return found[1]
    loading: set[int] = set()

    def mark(e: Expr) -> bool:
        inside = any([mark(c) for c in e.children()])
        if inside or (isinstance(e, (Load, ClusterLoad)) and e.array in arrays):
            loading.add(id(e))
            return True
        return False

    def mark_statements(body: tuple[Stmt, ...]) -> bool:
        inside = False
        for s in body:
            nested = [mark_statements(b) for b in _bodies(s)]
            named = any(isinstance(getattr(s, f.name), str) and getattr(s, f.name) in arrays
                        for f in attrs.fields(type(s)))
            if any(nested) | any([mark(e) for e in expressions(s)]) | named:
                loading.add(id(s))
                inside = True
        return inside

    mark_statements(kernel.body)
    _loading_kept[key] = (kernel, loading)
    while len(_loading_kept) > _LOADING_KEPT:
        del _loading_kept[next(iter(_loading_kept))]
    return loading


def _bodies(s: Stmt) -> tuple[tuple[Stmt, ...], ...]:
    if isinstance(s, (For, Divergent)):
        return (s.body,)
    if isinstance(s, If):
        return (s.then, s.orelse)
    return ()


_LOADING_KEPT = 64
_loading_kept: dict[tuple[int, frozenset[str]], tuple[Kernel, set[int]]] = {}
"""Per kernel (held, so that the identities stay its expressions') and renamed arrays."""


MAX_GRID = (2**31 - 1, 65535, 65535)
"""The most blocks CUDA launches along x, y and z."""


def launch_grid(kernel: Kernel, values: Mapping[str, int]) -> tuple[int, int, int]:
    """The kernel's grid at a call's sizes (``values``): an ``InputMismatchError`` where those sizes
    would need more blocks along an axis than CUDA launches, never a launch that leaves some out."""
    grid = tuple(sizes.evaluate(g, values) for g in kernel.launch.grid)
    for axis, (count, most) in enumerate(zip(grid, MAX_GRID)):
        if count > most:
            at = ", ".join(f"{k} = {v}" for k, v in sorted(values.items()) if k in kernel.sizes)
            raise InputMismatchError(
                f"kernel {kernel.name} needs {count} blocks along {'xyz'[axis]} at {at}, more than the {most} CUDA "
                "launches: these sizes are past what the program was compiled for; call it with smaller inputs")
    return grid


def with_sizes(kernel: Kernel, values: Mapping[str, int]) -> Kernel:
    """``kernel`` for one call: each size known only at run time (``kernel.sizes``) replaced by its
    value, in the body, the launch, the parameters' element counts and the tensor maps' shapes."""
    if not kernel.sizes:
        return kernel
    constants = {name: ex.const(values[name]) for name in kernel.sizes}

    def number(size):
        return int(index.simplify(ex.substitute(size, constants)).value) if isinstance(size, Expr) else size

    def fill(e: Expr) -> Expr:
        return index.simplify(ex.substitute(e, constants)) if ex.free_vars(e) & constants.keys() else e

    launch = attrs.evolve(kernel.launch, grid=launch_grid(kernel, values))
    maps = tuple(attrs.evolve(m, shape=tuple(number(s) for s in m.shape)) for m in kernel.tensor_maps)
    return attrs.evolve(kernel, params=tuple(attrs.evolve(p, numel=number(p.numel)) for p in kernel.params),
                        body=map_body(kernel.body, fill, {}), launch=launch, tensor_maps=maps, sizes=())

"""Recognising a row reduction whose row elements are sums over a contraction's reduce loop.

``fuse_contraction_into_row_reduction`` writes such a kernel: each loop over the row
first computes its element, a dot product, then uses it as the row reduction did::

    for i1 in parallel(heads):
      for i2 in parallel(rows):
        acc0: f32 = -inf
        for r0 in reduce(n):
          bmm: f32 = 0.0
          for r2 in reduce(d):
            bmm += q[0, i1, i2, r2] * k[0, i1, r0, r2]
          acc0 = max(acc0, bmm * 0.088)
        acc1: f32 = 0.0
        for r1 in reduce(n): ... acc1 += exp(bmm_1 * 0.088 - acc0)
        for i3 in serial(n): ... out[0, i1, i2, i3] = exp(bmm_2 * 0.088 - acc0) / acc1

Every loop over the row computes the same dot product (up to names). The schedule
computes it once per element, as the contraction schedule would compute the product
``bmm[i1, i2, i3]``, and runs the row's loops over the registers that hold it.
``analyse`` returns that product as a ``Contraction`` over the kernel's rows and the
column variable of its first store loop, whose epilogue is that loop's stores.
"""

from __future__ import annotations

import math

import attrs

from lamina.core.ir import expr as ex, loop_ir
from lamina.core.ir.dtypes import DType
from lamina.core.ir.expr import Expr
from lamina.plugins.fusion import analysis
from lamina.plugins.schedules.contraction import Contraction, NotAContraction
from lamina.plugins.schedules.contraction import analyse as analyse_contraction
from lamina.plugins.schedules.loop_to_kernel import split_parallel_nest

IDENTITY = {"sum": 0.0, "prod": 1.0, "max": -math.inf, "min": math.inf}


class NotContractionRows(Exception):
    """The kernel is not a row reduction over a contraction's rows; the message says why."""


@attrs.frozen
class ContractionRows:
    """The product whose rows are reduced, and what the kernel does with each row.

    ``reductions`` are the row's Inits and reduce loops in order, with every loop's column
    variable and dot product renamed to the contraction's ``n`` and ``acc``, and
    ``element`` replaced by ``acc``, as in the contraction's epilogue.
    """

    kernel: loop_ir.Kernel
    contraction: Contraction
    element: Expr
    """What each loop over the row reads of the product's element ``contraction.acc``
    (``where(mask, -inf, acc * scale)``); the loops read it as ``acc``."""
    reductions: tuple[loop_ir.Stmt, ...] = attrs.field(converter=tuple)
    accumulators: dict[str, tuple[str, DType]]
    """Row accumulator -> (its accumulation, its type)."""
    reduce_loops: tuple[str, ...] = attrs.field(converter=tuple)
    """The kernel's reduce loops over the row, as it names them."""


@attrs.frozen
class _RowLoop:
    loop: loop_ir.Loop
    dot: loop_ir.Init
    sum: loop_ir.Loop
    rest: tuple[loop_ir.Stmt, ...]


def _row_loop(s: loop_ir.Loop, where: str) -> _RowLoop:
    body = s.body
    if not (len(body) >= 3 and isinstance(body[0], loop_ir.Init) and isinstance(body[1], loop_ir.Loop)):
        raise NotContractionRows(f"{where}: loop {s.var} over the row does not start by computing a dot product")
    dot, total = body[0], body[1]
    if not (total.kind == "reduce" and len(total.body) == 1 and isinstance(total.body[0], loop_ir.Accumulate)
            and total.body[0].acc == dot.acc and total.body[0].op == "sum"):
        raise NotContractionRows(f"{where}: loop {s.var} must sum into {dot.acc} in one reduce loop")
    rest = body[2:]
    wanted = loop_ir.Accumulate if s.kind == "reduce" else loop_ir.Store
    if not all(isinstance(r, wanted) for r in rest):
        raise NotContractionRows(f"{where}: loop {s.var} over the row holds more than {wanted.__name__}s after its dot")
    return _RowLoop(s, dot, total, rest)


def _renamed(row: _RowLoop, names: dict[str, str]) -> _RowLoop:
    loop = analysis.renamed((row.loop,), names)[0]
    return _RowLoop(loop, loop.body[0], loop.body[1], loop.body[2:])


def analyse(kernel: loop_ir.Kernel) -> ContractionRows:
    """The structure of ``kernel``, or ``NotContractionRows`` saying what does not fit."""
    where = f"loop kernel {kernel.name}"
    loops, inner = split_parallel_nest(kernel.body)
    if not loops:
        raise NotContractionRows(f"{where} has no parallel loops")
    row_loops, inits, order = [], {}, []
    for s in inner:
        if isinstance(s, loop_ir.Loop) and s.kind in ("reduce", "serial"):
            row_loops.append(_row_loop(s, where))
            order.append(row_loops[-1])
        elif isinstance(s, loop_ir.Init):
            inits[s.acc] = s
            order.append(s)
        else:
            raise NotContractionRows(f"{where}: a {type(s).__name__} among the row's statements, where only "
                                     "Inits and loops over the row may be")
    stores = [r for r in row_loops if r.loop.kind == "serial"]
    reductions = [r for r in row_loops if r.loop.kind == "reduce"]
    if not stores or not reductions:
        raise NotContractionRows(f"{where}: needs a reduce loop and a store loop over the row")
    first = stores[0]
    lengths = {r.loop.extent for r in row_loops}
    if len(lengths) != 1:
        raise NotContractionRows(f"{where}: the loops over the row have different extents {sorted(lengths)}")
    column, k, dot = first.loop.var, first.sum.var, first.dot.acc
    renamed = [_renamed(r, {r.loop.var: column, r.sum.var: k, r.dot.acc: dot}) for r in row_loops]
    if any((r.dot, r.sum) != (renamed[0].dot, renamed[0].sum) for r in renamed):
        raise NotContractionRows(f"{where}: the loops over the row compute different dot products")
    dot_var = ex.Var(dot, renamed[0].dot.value.dtype)
    element = _common_element(renamed, dot_var, set(inits))
    renamed = [_reading_the_element(r, element, dot_var) for r in renamed]

    accumulators = {}
    for r in renamed:
        for a in r.rest if r.loop.kind == "reduce" else ():
            init = inits.get(a.acc)
            identity = IDENTITY.get(a.op)
            if init is None or not isinstance(init.value, ex.Const) or init.value.value != identity:
                raise NotContractionRows(f"{where}: accumulator {a.acc} must start from the identity of {a.op}")
            if a.acc in accumulators:
                raise NotContractionRows(f"{where}: accumulator {a.acc} is reduced by two loops")
            accumulators[a.acc] = (a.op, init.value.dtype)
    unreduced = sorted(set(inits) - set(accumulators))
    if unreduced:
        raise NotContractionRows(f"{where}: accumulators {', '.join(unreduced)} are declared but never reduced")

    dot_init, dot_sum = renamed[0].dot, renamed[0].sum
    product = loop_ir.Loop(column, first.loop.extent, "parallel", (dot_init, dot_sum))
    probe_store = loop_ir.Store(first.rest[0].buffer, first.rest[0].index, ex.Var(dot, dot_init.value.dtype))
    probe = attrs.evolve(kernel, body=_nest(loops, (attrs.evolve(product, body=product.body + (probe_store,)),)))
    try:
        c = analyse_contraction(probe)
    except NotAContraction as e:
        raise NotContractionRows(f"{where}: the dot product of its rows is not a contraction: {e}") from None
    if c.n != column:
        raise NotContractionRows(f"{where}: the output is not contiguous along the row's column {column}")
    if c.slice_bound is not None:
        raise NotContractionRows(f"{where}: its dot products end early in some rows' blocks (a split-K slice)")
    epilogue = tuple(s for r in renamed if r.loop.kind == "serial" for s in r.rest)
    product_kernel = attrs.evolve(kernel, body=_nest(loops, (attrs.evolve(product, body=product.body + epilogue),)))
    c = attrs.evolve(c, kernel=product_kernel, epilogue=epilogue)
    by_loop = {id(r): n for r, n in zip(row_loops, renamed)}
    steps = [s if isinstance(s, loop_ir.Init) else _without_dot(by_loop[id(s)]) for s in order
             if isinstance(s, loop_ir.Init) or s.loop.kind == "reduce"]
    return ContractionRows(kernel, c, element, steps, accumulators, [r.loop.var for r in reductions])


def _common_element(rows: list[_RowLoop], dot: ex.Var, accumulators: set[str]) -> Expr:
    """The largest expression of the dot product that every loop over the row computes
    (``where(mask, -inf, bmm * scale)``), of the dot product's type and reading no row
    accumulator, so that it can be computed before the reductions; the dot product itself
    where there is none larger."""
    common = None
    for r in rows:
        for s in r.rest:
            found = {node for node in ex.walk(s.value) if dot.name in ex.free_vars(node)
                     and node.dtype == dot.dtype and not ex.free_vars(node) & accumulators}
            common = found if common is None else common & found
    if not common:
        return dot
    return max(common, key=lambda node: (sum(1 for _ in ex.walk(node)), loop_ir.format_value(node)))


def _reading_the_element(row: _RowLoop, element: Expr, dot: ex.Var) -> _RowLoop:
    rest = loop_ir.map_expressions(row.rest, lambda e: ex.transform(e, lambda n: dot if n == element else None))
    return attrs.evolve(row, rest=tuple(rest), loop=attrs.evolve(row.loop, body=(row.dot, row.sum) + tuple(rest)))


def _without_dot(row: _RowLoop) -> loop_ir.Loop:
    return attrs.evolve(row.loop, body=row.rest)


def _nest(loops: tuple[loop_ir.Loop, ...], body: tuple[loop_ir.Stmt, ...]) -> tuple[loop_ir.Stmt, ...]:
    for loop in reversed(loops):
        body = (attrs.evolve(loop, body=body),)
    return body


"""Translating Loop IR into Kernel IR: the part every schedule shares.

A schedule decides where each parallel iteration runs (which thread, which block,
which register); what happens inside one iteration is the same for all of them. These
helpers write that part, given what the schedule decided.

``env`` maps Loop IR variable names (loop variables and accumulators) to the Kernel IR
expressions that stand for them in the thread: ``{"i0": Var("row"), "i1": tx + 32}``.
A name that is not in ``env`` stays a ``Var`` of the same name (accumulators declared
by ``translate_body`` need no entry). An accumulator may also be mapped to an element
of a register array (``kernel_ir.Load("acc", (Const(0), Const(1)))``): its ``Init`` and
``Accumulate`` then become stores into that element.

API:

- ``split_parallel_nest(body) -> (loops, inner)``: the perfect nest of parallel loops
  at the top of a kernel body, outermost first, and the statements inside it.
- ``params(kernel) -> tuple[kernel_ir.Param, ...]``: one pointer parameter per buffer,
  inputs read-only then outputs writable, each ``prod(shape)`` elements.
- ``size_params(kernel) -> tuple[str, ...]``: the symbols of its sizes known only at run
  time (``s0``), which the Kernel IR takes by value (``kernel_ir.Kernel.sizes``).
- ``global_load(kernel) -> LoadFn``: the default way to read a buffer, the row-major
  element of its global parameter.
- ``translate_expr(expr, kernel, env, load=None) -> Expr``: a Loop IR expression
  as a Kernel IR expression. ``load(node, index)`` is called for every
  ``loop_ir.Load`` with its index already translated and returns the Kernel IR
  expression that reads it (default: ``global_load(kernel)``).
- ``translate_body(body, kernel, env, load=None, guard=None) -> tuple[kernel_ir.Stmt, ...]``:
  Loop IR statements as Kernel IR statements. Reduce and serial loops (and parallel
  loops nested inside them) become ``For`` loops over ``0..extent``, ``Init`` becomes
  ``Declare``, ``Accumulate`` becomes ``Assign(acc, op(acc, value))`` with ``add``,
  ``mul``, ``max`` or ``min``, and ``Store`` writes the row-major element of its
  output parameter, inside ``If(guard)`` when a guard is given.
- ``combine(op, acc, value) -> Expr``: what one ``Accumulate`` computes.
- ``bind_point(loops, linear, total) -> (declarations, env)``: the loop variables of
  a flattened parallel nest at point ``linear`` (row-major), with the declarations of
  those that are not plain expressions of ``linear``.
"""

from __future__ import annotations

from typing import Callable, Mapping

from lamina.core.errors import ScheduleError
from lamina.core.ir import dtypes, expr as ex, index, kernel_ir, loop_ir, sizes
from lamina.core.ir.expr import Expr
from lamina.core.ir.sizes import Size

LoadFn = Callable[[loop_ir.Load, tuple[Expr, ...]], Expr]
"""Reads ``node.buffer`` at ``index`` (Kernel IR coordinates, one per buffer axis)."""

Env = Mapping[str, Expr]

_COMBINE = {"sum": "add", "prod": "mul", "max": "max", "min": "min"}


split_parallel_nest = loop_ir.split_parallel_nest
"""Loop IR's own, named here too, where the schedules and third-party plugins have imported it from."""


def params(kernel: loop_ir.Kernel) -> tuple[kernel_ir.Param, ...]:
    """Pointer parameters named like the kernel's buffers: inputs first, then outputs."""
    found = [kernel_ir.Param(b.name, b.type.dtype, sizes.numel(b.type.shape)) for b in kernel.inputs]
    found += [kernel_ir.Param(b.name, b.type.dtype, sizes.numel(b.type.shape), writable=True) for b in kernel.outputs]
    return tuple(found)


def size_params(kernel: loop_ir.Kernel) -> tuple[str, ...]:
    """The symbols of the sizes known only at run time that the kernel's buffers, loops and
    expressions use, in order."""
    used = {name for b in kernel.inputs + kernel.outputs for name in sizes.symbols(b.type.shape)}
    for s in loop_ir.statements(kernel.body):
        used |= sizes.symbols(s.extent) if isinstance(s, loop_ir.Loop) else set()
        used |= {name for e in loop_ir.expressions(s) for name in ex.free_vars(e) if sizes.is_symbol_name(name)}
    return tuple(sorted(used, key=lambda name: int(name[1:])))


def global_load(kernel: loop_ir.Kernel) -> LoadFn:
    """Read the row-major element of the buffer's global parameter."""

    def load(node: loop_ir.Load, idx: tuple[Expr, ...]) -> Expr:
        shape = kernel.buffer(node.buffer).type.shape
        return kernel_ir.Load(node.buffer, (index.linearize(idx, shape),), node.dtype)

    return load


def translate_expr(expr: Expr, kernel: loop_ir.Kernel, env: Env, load: LoadFn | None = None) -> Expr:
    """``expr`` with variables replaced from ``env`` and buffer reads made by ``load``."""
    read = load or global_load(kernel)

    def replace(node: Expr) -> Expr | None:
        if isinstance(node, ex.Var):
            return env.get(node.name)
        if isinstance(node, loop_ir.Load):
            return read(node, tuple(index.simplify(i) for i in node.index))
        return None

    return ex.transform(expr, replace)


def combine(op: str, acc: Expr, value: Expr) -> Expr:
    """``acc`` combined with ``value`` by the accumulation ``op`` (sum, prod, max, min)."""
    if op not in _COMBINE:
        raise ScheduleError(f"unknown accumulation {op!r}; Loop IR accumulates with {', '.join(_COMBINE)}")
    return ex.Op(_COMBINE[op], (acc, ex.cast(value, acc.dtype)), acc.dtype)


def translate_body(
    body: tuple[loop_ir.Stmt, ...],
    kernel: loop_ir.Kernel,
    env: Env,
    load: LoadFn | None = None,
    guard: Expr | None = None,
) -> tuple[kernel_ir.Stmt, ...]:
    """Loop IR statements as Kernel IR statements run by one thread."""
    return tuple(_translate(body, kernel, dict(env), load or global_load(kernel), guard))


def _translate(body, kernel, env, load, guard) -> list[kernel_ir.Stmt]:
    out: list[kernel_ir.Stmt] = []
    for s in body:
        if isinstance(s, loop_ir.Loop):
            inner_env = {**env, s.var: ex.Var(s.var)}
            inner = _translate(s.body, kernel, inner_env, load, guard)
            out.append(kernel_ir.For(s.var, ex.const(0), ex.const(s.extent), 1, tuple(inner)))
        elif isinstance(s, loop_ir.Init):
            value = translate_expr(s.value, kernel, env, load)
            target = env.get(s.acc)
            if isinstance(target, kernel_ir.Load):
                out.append(kernel_ir.Store(target.array, target.index, value))
            else:
                name = target.name if isinstance(target, ex.Var) else s.acc
                out.append(kernel_ir.Declare(name, s.value.dtype, value))
                env[s.acc] = ex.Var(name, s.value.dtype)
        elif isinstance(s, loop_ir.Accumulate):
            target = env.get(s.acc)
            if target is None:
                raise ScheduleError(
                    f"kernel {kernel.name}: accumulator {s.acc} is combined into before it is declared; "
                    "give it an Init or map it to a Kernel IR expression"
                )
            value = combine(s.op, target, translate_expr(s.value, kernel, env, load))
            if isinstance(target, kernel_ir.Load):
                out.append(kernel_ir.Store(target.array, target.index, value))
            else:
                out.append(kernel_ir.Assign(target.name, value))
        else:
            shape = kernel.buffer(s.buffer).type.shape
            idx = tuple(translate_expr(i, kernel, env, load) for i in s.index)
            store = kernel_ir.Store(s.buffer, (index.linearize(idx, shape),), translate_expr(s.value, kernel, env, load))
            out.append(kernel_ir.If(guard, (store,)) if guard is not None else store)
    return out


def bind_point(
    loops: tuple[loop_ir.Loop, ...], linear: ex.Var, total: Size
) -> tuple[list[kernel_ir.Stmt], dict[str, Expr]]:
    """The coordinates of point ``linear`` of a parallel nest of ``total`` points."""
    declarations: list[kernel_ir.Stmt] = []
    env: dict[str, Expr] = {}
    extents = tuple(loop.extent for loop in loops)
    points = total if sizes.is_symbolic(total) else max(total, 1)
    for loop, coordinate in zip(loops, index.delinearize(linear, extents, {linear.name: points})):
        if isinstance(coordinate, (ex.Var, ex.Const)):
            env[loop.var] = coordinate
        else:
            declarations.append(kernel_ir.Declare(loop.var, dtypes.index, coordinate))
            env[loop.var] = ex.Var(loop.var)
    return declarations, env


def names_in(kernel: loop_ir.Kernel) -> set[str]:
    """Every name a loop kernel uses (buffers, loop variables, accumulators): what a lowering's
    fresh names must avoid."""
    names = {b.name for b in kernel.inputs + kernel.outputs}
    names |= {name for b in kernel.inputs + kernel.outputs for name in sizes.symbols(b.type.shape)}
    for s in loop_ir.statements(kernel.body):
        if isinstance(s, loop_ir.Loop):
            names.add(s.var)
            names |= sizes.symbols(s.extent)
        elif isinstance(s, (loop_ir.Init, loop_ir.Accumulate)):
            names.add(s.acc)
    return names

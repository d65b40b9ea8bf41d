"""What the fusion rules need to know about kernels: their shape, who reads what."""

from __future__ import annotations

from typing import Callable

import attrs

from lamina.core.ir import expr as ex, index, loop_ir
from lamina.core.ir.expr import Expr

Ranges = dict[str, int]

MAX_EXPRESSION_NODES = 4096
"""Fusion copies a value once per use: ``y = x * x`` inlined into ``z = y * y`` doubles
it. Past this many expression nodes in one kernel, rules leave kernels apart rather
than let a chain of such uses grow the code exponentially."""


@attrs.frozen
class Pointwise:
    """A kernel that stores one value per point of its parallel loops, at exactly those loops' variables."""

    loops: tuple[loop_ir.Loop, ...]
    store: loop_ir.Store

    @property
    def vars(self) -> tuple[str, ...]:
        return tuple(loop.var for loop in self.loops)


def parallel_nest(kernel: loop_ir.Kernel) -> tuple[tuple[loop_ir.Loop, ...], tuple[loop_ir.Stmt, ...]]:
    """The perfect nest of parallel loops around the kernel's statements, and those statements."""
    loops = []
    body = kernel.body
    while len(body) == 1 and isinstance(body[0], loop_ir.Loop) and body[0].kind == "parallel":
        loops.append(body[0])
        body = body[0].body
    return tuple(loops), tuple(body)


def pointwise(kernel: loop_ir.Kernel) -> Pointwise | None:
    """The kernel as a Pointwise, or None when it reduces, declares, or stores anywhere else."""
    loops, body = parallel_nest(kernel)
    if len(body) != 1 or not isinstance(body[0], loop_ir.Store) or len(kernel.outputs) != 1:
        return None
    store = body[0]
    identity = tuple(ex.Var(loop.var) for loop in loops)
    shape = kernel.outputs[0].type.shape
    if store.buffer != kernel.outputs[0].name or store.index != identity:
        return None
    if tuple(loop.extent for loop in loops) != shape:
        return None
    return Pointwise(loops, store)


def buffers(program: loop_ir.Program) -> dict[str, loop_ir.Buffer]:
    found = {b.name: b for b in program.inputs + program.temporaries + program.outputs}
    for k in program.kernels:
        for b in k.inputs + k.outputs:
            found.setdefault(b.name, b)
    return found


def loaded_buffers(kernel: loop_ir.Kernel) -> list[str]:
    """Names of the buffers the kernel reads, in order of first load."""
    return list(dict.fromkeys(load.buffer for load in loop_ir.loads(kernel.body)))


def with_exact_inputs(kernel: loop_ir.Kernel, known: dict[str, loop_ir.Buffer]) -> loop_ir.Kernel:
    """The kernel with its inputs set to exactly the buffers it loads, in order of first load."""
    inputs = tuple(known[name] for name in loaded_buffers(kernel))
    return kernel if inputs == kernel.inputs else attrs.evolve(kernel, inputs=inputs)


def map_with_ranges(
    body: tuple[loop_ir.Stmt, ...], fn: Callable[[Expr, Ranges], Expr], ranges: Ranges | None = None
) -> tuple[loop_ir.Stmt, ...]:
    """Rebuild ``body`` with ``fn(expr, ranges)`` applied to every expression; ``ranges``
    holds the extents of the loops around the expression."""
    ranges = dict(ranges or {})
    out = []
    for s in body:
        if isinstance(s, loop_ir.Loop):
            out.append(attrs.evolve(s, body=map_with_ranges(s.body, fn, {**ranges, s.var: s.extent})))
        elif isinstance(s, (loop_ir.Init, loop_ir.Accumulate)):
            out.append(attrs.evolve(s, value=fn(s.value, ranges)))
        else:
            out.append(attrs.evolve(s, index=tuple(fn(e, ranges) for e in s.index), value=fn(s.value, ranges)))
    return tuple(out)


def simplify_indices(expr: Expr, ranges: Ranges) -> Expr:
    """``expr`` with the index of every load simplified under ``ranges``."""

    def simplify(node: Expr) -> Expr | None:
        if isinstance(node, loop_ir.Load):
            simplified = tuple(index.simplify(i, ranges) for i in node.index)
            return attrs.evolve(node, index=simplified) if simplified != node.index else None
        return None

    return ex.transform(expr, simplify)


def without_buffers(program: loop_ir.Program, names: set[str]) -> loop_ir.Program:
    """The program with temporaries ``names`` no longer listed."""
    kept = tuple(b for b in program.temporaries if b.name not in names)
    return attrs.evolve(program, temporaries=kept)


def nodes(kernel: loop_ir.Kernel) -> int:
    """How many expression nodes the kernel's statements hold."""
    return sum(sum(1 for _ in ex.walk(e)) for s in loop_ir.statements(kernel.body) for e in loop_ir.expressions(s))


def copies_fit(host: loop_ir.Kernel, buffer: str, value: Expr, extra: int = 0) -> bool:
    """Whether ``host`` stays within ``MAX_EXPRESSION_NODES`` once every load of ``buffer``
    in it is replaced by a copy of ``value`` (and ``extra`` nodes are added)."""
    uses = sum(1 for load in loop_ir.loads(host.body) if load.buffer == buffer)
    return nodes(host) + extra + uses * sum(1 for _ in ex.walk(value)) <= MAX_EXPRESSION_NODES

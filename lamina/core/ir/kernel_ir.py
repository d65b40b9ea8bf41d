"""Kernel IR: the CUDA program as data.

A ``Kernel`` has pointer parameters (one per buffer, flat, row-major), shared arrays
with their padded shapes, a body of statements, and its launch configuration. Its
expressions are those of ``lamina.core.ir.expr`` plus ``Load`` from an array and the
thread and block indices. Arrays live in one of three spaces: ``global`` (the
parameters), ``shared`` and ``register`` (per-thread arrays, indexed only by
constants after unrolling).

Loop bounds must be the same for every thread of the grid; anything that varies per
thread is an ``If``. That is how the schedules are written, and it lets the CPU
simulator run a whole grid in lockstep.
"""

from __future__ import annotations

import math
from typing import Iterator

import attrs

from lamina.core.errors import VerificationError
from lamina.core.ir import dtypes, expr as ex
from lamina.core.ir.dtypes import DType
from lamina.core.ir.expr import Expr

SPACES = ("global", "shared", "register")
SPECIALS = ("threadIdx", "blockIdx")


@attrs.frozen(eq=True)
class Special(Expr):
    """``threadIdx.x``, ``blockIdx.y`` ..."""

    kind: str
    axis: str
    dtype: DType = dtypes.index


@attrs.frozen(eq=True)
class Load(Expr):
    array: str
    index: tuple[Expr, ...] = attrs.field(converter=tuple)
    dtype: DType

    def children(self):
        return self.index

    def rebuild(self, children):
        return attrs.evolve(self, index=tuple(children))


def thread_idx(axis: str = "x") -> Special:
    return Special("threadIdx", axis)


def block_idx(axis: str = "x") -> Special:
    return Special("blockIdx", axis)


@attrs.frozen
class Param:
    """A pointer parameter: buffer ``name`` as a flat array of ``numel`` elements."""

    name: str
    dtype: DType
    numel: int
    writable: bool = False


@attrs.frozen
class Array:
    """A shared or register array. ``shape`` includes padding; ``space`` is shared or register."""

    name: str
    dtype: DType
    shape: tuple[int, ...] = attrs.field(converter=tuple)
    space: str

    @property
    def bytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


# --- statements --------------------------------------------------------------

@attrs.frozen
class Declare:
    """A per-thread scalar ``var`` of ``dtype``, optionally initialised."""

    var: str
    dtype: DType
    init: Expr | None = None


@attrs.frozen
class Assign:
    var: str
    value: Expr


@attrs.frozen
class Store:
    array: str
    index: tuple[Expr, ...] = attrs.field(converter=tuple)
    value: Expr


@attrs.frozen
class For:
    """``for var in range(start, stop, step)``; bounds are the same in every thread."""

    var: str
    start: Expr
    stop: Expr
    step: int
    body: tuple["Stmt", ...] = attrs.field(converter=tuple)
    unroll: bool = False


@attrs.frozen
class If:
    cond: Expr
    then: tuple["Stmt", ...] = attrs.field(converter=tuple)
    orelse: tuple["Stmt", ...] = attrs.field(converter=tuple, default=())


@attrs.frozen
class Barrier:
    """All threads of the block wait here; shared-memory writes before it are visible after it."""


@attrs.frozen
class CpAsync:
    """Asynchronous copy of one element (``bytes`` wide) from global to shared memory.

    Where ``predicate`` is false the destination is filled with zeros and the source is
    not read. The data may be read only after a ``CpAsyncWait`` that covers its group
    and a ``Barrier``.
    """

    dst: str
    dst_index: tuple[Expr, ...] = attrs.field(converter=tuple)
    src: str
    src_index: tuple[Expr, ...] = attrs.field(converter=tuple)
    bytes: int = 4
    predicate: Expr | None = None


@attrs.frozen
class CpAsyncCommit:
    """Close the current group of asynchronous copies."""


@attrs.frozen
class CpAsyncWait:
    """Wait until at most ``pending`` groups of this thread's copies are still in flight."""

    pending: int = 0


@attrs.frozen
class Comment:
    text: str


Stmt = Declare | Assign | Store | For | If | Barrier | CpAsync | CpAsyncCommit | CpAsyncWait | Comment


@attrs.frozen
class Launch:
    grid: tuple[int, int, int] = attrs.field(converter=tuple)
    block: tuple[int, int, int] = attrs.field(converter=tuple)
    dynamic_shared_bytes: int = 0

    @property
    def threads_per_block(self) -> int:
        return math.prod(self.block)


@attrs.frozen
class Kernel:
    name: str
    params: tuple[Param, ...] = attrs.field(converter=tuple)
    arrays: tuple[Array, ...] = attrs.field(converter=tuple)
    body: tuple[Stmt, ...] = attrs.field(converter=tuple)
    launch: Launch

    def array(self, name: str) -> Param | Array:
        for a in self.params + self.arrays:
            if a.name == name:
                return a
        raise KeyError(name)

    @property
    def shared_bytes(self) -> int:
        return sum(a.bytes for a in self.arrays if a.space == "shared")


@attrs.frozen
class Program:
    """Kernel IR kernels in launch order; parameter names are the Loop IR buffer names."""

    kernels: tuple[Kernel, ...] = attrs.field(converter=tuple)


# --- traversal ---------------------------------------------------------------

def statements(body: tuple[Stmt, ...]) -> Iterator[Stmt]:
    for s in body:
        yield s
        if isinstance(s, For):
            yield from statements(s.body)
        elif isinstance(s, If):
            yield from statements(s.then)
            yield from statements(s.orelse)


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
    if isinstance(s, CpAsync):
        return s.dst_index + s.src_index + ((s.predicate,) if s.predicate is not None else ())
    return ()


def rename_arrays(kernel: Kernel, mapping: dict[str, str], name: str | None = None) -> Kernel:
    """The same kernel with arrays (parameters, shared and register arrays) renamed by
    ``mapping``, and the kernel itself renamed to ``name`` if given."""

    def rename_expr(e: Expr) -> Expr:
        return ex.transform(e, lambda n: attrs.evolve(n, array=mapping[n.array]) if isinstance(n, Load) and n.array in mapping else None)

    def rename_body(body):
        out = []
        for s in body:
            if isinstance(s, For):
                s = attrs.evolve(s, start=rename_expr(s.start), stop=rename_expr(s.stop), body=rename_body(s.body))
            elif isinstance(s, If):
                s = attrs.evolve(s, cond=rename_expr(s.cond), then=rename_body(s.then), orelse=rename_body(s.orelse))
            elif isinstance(s, Declare) and s.init is not None:
                s = attrs.evolve(s, init=rename_expr(s.init))
            elif isinstance(s, Assign):
                s = attrs.evolve(s, value=rename_expr(s.value))
            elif isinstance(s, Store):
                s = attrs.evolve(s, array=mapping.get(s.array, s.array), index=tuple(map(rename_expr, s.index)), value=rename_expr(s.value))
            elif isinstance(s, CpAsync):
                s = attrs.evolve(
                    s, dst=mapping.get(s.dst, s.dst), src=mapping.get(s.src, s.src),
                    dst_index=tuple(map(rename_expr, s.dst_index)), src_index=tuple(map(rename_expr, s.src_index)),
                    predicate=None if s.predicate is None else rename_expr(s.predicate),
                )
            out.append(s)
        return tuple(out)

    return attrs.evolve(
        kernel,
        name=kernel.name if name is None else name,
        params=tuple(attrs.evolve(p, name=mapping.get(p.name, p.name)) for p in kernel.params),
        arrays=tuple(attrs.evolve(a, name=mapping.get(a.name, a.name)) for a in kernel.arrays),
        body=rename_body(kernel.body),
    )


# --- printing ----------------------------------------------------------------

def _leaf(e: Expr):
    if isinstance(e, Special):
        return f"{e.kind}.{e.axis}"
    if isinstance(e, Load):
        return e.array + "".join(f"[{format_expr(i)}]" for i in e.index)
    return None


def format_expr(e: Expr) -> str:
    return ex.format_expr(e, _leaf)


def _index(idx) -> str:
    return "".join(f"[{format_expr(i)}]" for i in idx)


def format_body(body, indent: str) -> list[str]:
    lines = []
    for s in body:
        if isinstance(s, Declare):
            init = f" = {format_expr(s.init)}" if s.init is not None else ""
            lines.append(f"{indent}var {s.var}: {s.dtype}{init}")
        elif isinstance(s, Assign):
            lines.append(f"{indent}{s.var} = {format_expr(s.value)}")
        elif isinstance(s, Store):
            lines.append(f"{indent}{s.array}{_index(s.index)} = {format_expr(s.value)}")
        elif isinstance(s, For):
            step = f", step {s.step}" if s.step != 1 else ""
            unroll = "unrolled " if s.unroll else ""
            lines.append(f"{indent}{unroll}for {s.var} in {format_expr(s.start)}..{format_expr(s.stop)}{step}:")
            lines += format_body(s.body, indent + "  ")
        elif isinstance(s, If):
            lines.append(f"{indent}if {format_expr(s.cond)}:")
            lines += format_body(s.then, indent + "  ")
            if s.orelse:
                lines.append(f"{indent}else:")
                lines += format_body(s.orelse, indent + "  ")
        elif isinstance(s, Barrier):
            lines.append(f"{indent}barrier")
        elif isinstance(s, CpAsync):
            pred = f" if {format_expr(s.predicate)} else zero" if s.predicate is not None else ""
            lines.append(f"{indent}cp.async {s.bytes} B {s.dst}{_index(s.dst_index)} <- {s.src}{_index(s.src_index)}{pred}")
        elif isinstance(s, CpAsyncCommit):
            lines.append(f"{indent}cp.async commit")
        elif isinstance(s, CpAsyncWait):
            lines.append(f"{indent}cp.async wait (at most {s.pending} pending)")
        elif isinstance(s, Comment):
            lines.append(f"{indent}# {s.text}")
    return lines


def format_kernel(k: Kernel) -> str:
    g, b = k.launch.grid, k.launch.block
    lines = [f"kernel {k.name}  grid ({g[0]}, {g[1]}, {g[2]})  block ({b[0]}, {b[1]}, {b[2]})"
             + (f"  dynamic shared {k.launch.dynamic_shared_bytes} B" if k.launch.dynamic_shared_bytes else "")]
    for p in k.params:
        mode = "out" if p.writable else "in"
        lines.append(f"  param {mode} {p.name}: {p.dtype}[{p.numel}]")
    for a in k.arrays:
        lines.append(f"  {a.space} {a.name}: {a.dtype}{''.join(f'[{n}]' for n in a.shape)}")
    lines += format_body(k.body, "  ")
    return "\n".join(lines)


def format_program(p: Program) -> str:
    return "\n\n".join(format_kernel(k) for k in p.kernels)


# --- verification ------------------------------------------------------------

def verify_kernel(k: Kernel, max_threads: int = 1024, max_shared_bytes: int = 48 * 1024) -> None:
    problems: list[str] = []
    arrays = {a.name: a for a in k.params + k.arrays}
    for a in k.arrays:
        if a.space not in ("shared", "register"):
            problems.append(f"array {a.name} is in unknown space {a.space}")

    def rank(name):
        a = arrays[name]
        return 1 if isinstance(a, Param) else len(a.shape)

    def check_expr(e, scope):
        for node in ex.walk(e):
            if isinstance(node, Load):
                if node.array not in arrays:
                    problems.append(f"load from unknown array {node.array}")
                elif len(node.index) != rank(node.array):
                    problems.append(f"load from {node.array} with {len(node.index)} indices; it has rank {rank(node.array)}")
            elif isinstance(node, ex.Var) and node.name not in scope:
                problems.append(f"variable {node.name} is used before it is declared")
            elif isinstance(node, Special) and (node.kind not in SPECIALS or node.axis not in ("x", "y", "z")):
                problems.append(f"unknown special {node.kind}.{node.axis}")

    def visit(body, scope):
        scope = set(scope)
        for s in body:
            for e in expressions(s):
                check_expr(e, scope)
            if isinstance(s, Declare):
                scope.add(s.var)
            elif isinstance(s, Assign) and s.var not in scope:
                problems.append(f"assignment to undeclared {s.var}")
            elif isinstance(s, Store):
                if s.array not in arrays:
                    problems.append(f"store to unknown array {s.array}")
                elif isinstance(arrays[s.array], Param) and not arrays[s.array].writable:
                    problems.append(f"store to input parameter {s.array}")
                elif len(s.index) != rank(s.array):
                    problems.append(f"store to {s.array} with {len(s.index)} indices; it has rank {rank(s.array)}")
            elif isinstance(s, For):
                visit(s.body, scope | {s.var})
            elif isinstance(s, If):
                visit(s.then, scope)
                visit(s.orelse, scope)
            elif isinstance(s, CpAsync):
                dst, src = arrays.get(s.dst), arrays.get(s.src)
                if not isinstance(dst, Array) or dst.space != "shared":
                    problems.append(f"cp.async destination {s.dst} is not a shared array")
                if not isinstance(src, Param):
                    problems.append(f"cp.async source {s.src} is not a global parameter")
                if s.bytes not in (4, 8, 16):
                    problems.append(f"cp.async copies 4, 8 or 16 bytes, not {s.bytes}")

    visit(k.body, set())
    if k.launch.threads_per_block > max_threads:
        problems.append(f"{k.launch.threads_per_block} threads per block exceed {max_threads}")
    if k.shared_bytes > max_shared_bytes + k.launch.dynamic_shared_bytes:
        problems.append(f"{k.shared_bytes} B of shared memory exceed the limit")
    if problems:
        raise VerificationError(f"Kernel IR {k.name} is inconsistent:\n  " + "\n  ".join(problems))


def verify_program(p: Program) -> None:
    for k in p.kernels:
        verify_kernel(k)

"""Loop IR: kernels as loop nests over named buffers.

A kernel is a nest of ``Loop`` statements (``parallel`` loops over output axes,
``reduce`` loops that feed accumulators, ``serial`` loops for everything else)
whose leaves declare accumulators (``Init``), combine into them (``Accumulate``) and
write buffers (``Store``). Expressions read buffers with ``Load``; an accumulator is
read as a ``Var`` of its name. Fusion rewrites these kernels so that intermediate
tensors never reach memory.
"""

from __future__ import annotations

import functools
from typing import Iterator

import attrs

from lamina.core.errors import VerificationError
from lamina.core.ir import expr as ex, index, sizes
from lamina.core.ir.dtypes import DType
from lamina.core.ir.expr import Expr
from lamina.core.ir.torch_ir import TensorType

LOOP_KINDS = ("parallel", "reduce", "serial")
ACCUMULATE_OPS = ("sum", "max", "min", "prod")


@attrs.frozen
class Buffer:
    name: str
    type: TensorType
    unread: Expr | None = None
    """Where no kernel reads this temporary: a condition on its coordinates, named ``i0``,
    ``i1``, ... by axis (``axis_var``). Its writer may leave those elements unwritten."""


def axis_var(axis: int) -> ex.Var:
    """The variable that stands for a buffer's coordinate along ``axis`` in ``Buffer.unread``."""
    return ex.Var(f"i{axis}")


@attrs.frozen(eq=True, cache_hash=True)
class Load(Expr):
    """``buffer[index]``, one element of a buffer."""

    buffer: str
    index: tuple[Expr, ...] = attrs.field(converter=tuple)
    dtype: DType

    def children(self):
        return self.index

    def rebuild(self, children):
        return attrs.evolve(self, index=tuple(children))


@attrs.frozen
class Loop:
    var: str
    extent: "int | Expr"
    """A number, or a size known only at run time (``s0``)."""
    kind: str
    body: tuple["Stmt", ...] = attrs.field(converter=tuple)


@attrs.frozen
class Init:
    """Declare accumulator ``acc`` and set it to ``value``."""

    acc: str
    value: Expr


@attrs.frozen
class Accumulate:
    """``acc = op(acc, value)``."""

    acc: str
    op: str
    value: Expr


@attrs.frozen
class Store:
    buffer: str
    index: tuple[Expr, ...] = attrs.field(converter=tuple)
    value: Expr


Stmt = Loop | Init | Accumulate | Store


@attrs.frozen(cache_hash=True)
class Kernel:
    """A loop nest that runs as one GPU kernel. Its hash is kept once computed: passes look kernels
    up in caches (what a kernel loads, what it costs) many times over a model's compile."""

    name: str
    inputs: tuple[Buffer, ...] = attrs.field(converter=tuple)
    outputs: tuple[Buffer, ...] = attrs.field(converter=tuple)
    body: tuple[Stmt, ...] = attrs.field(converter=tuple)

    def buffer(self, name: str) -> Buffer:
        for b in self.inputs + self.outputs:
            if b.name == name:
                return b
        raise KeyError(name)


@attrs.frozen
class Program:
    """Kernels in launch order. ``inputs``/``outputs`` name the program's tensors;
    ``temporaries`` are buffers written by one kernel and read by a later one."""

    inputs: tuple[Buffer, ...] = attrs.field(converter=tuple)
    outputs: tuple[Buffer, ...] = attrs.field(converter=tuple)
    temporaries: tuple[Buffer, ...] = attrs.field(converter=tuple)
    kernels: tuple[Kernel, ...] = attrs.field(converter=tuple)


def has_symbolic_sizes(kernel: Kernel) -> bool:
    """Whether a loop's extent or a buffer's shape in ``kernel`` is known only at run time."""
    return (any(sizes.is_symbolic(b.type.shape) for b in kernel.inputs + kernel.outputs)
            or any(isinstance(s, Loop) and sizes.is_symbolic(s.extent) for s in statements(kernel.body)))


# --- traversal ---------------------------------------------------------------

def statements(body: tuple[Stmt, ...]) -> Iterator[Stmt]:
    """Every statement of ``body``, loops before their contents."""
    for s in body:
        yield s
        if isinstance(s, Loop):
            yield from statements(s.body)


def split_parallel_nest(body: tuple[Stmt, ...]) -> tuple[tuple[Loop, ...], tuple[Stmt, ...]]:
    """The parallel loops that wrap ``body`` one inside the other, and what they wrap."""
    loops = []
    while len(body) == 1 and isinstance(body[0], Loop) and body[0].kind == "parallel":
        loops.append(body[0])
        body = body[0].body
    return tuple(loops), tuple(body)


def expressions(s: Stmt) -> tuple[Expr, ...]:
    """The expressions a statement holds directly (not those of nested loops)."""
    if isinstance(s, (Init, Accumulate)):
        return (s.value,)
    if isinstance(s, Store):
        return s.index + (s.value,)
    return ()


def map_expressions(body: tuple[Stmt, ...], fn) -> tuple[Stmt, ...]:
    """Rebuild ``body`` with ``fn`` applied to every expression."""
    out = []
    for s in body:
        if isinstance(s, Loop):
            out.append(attrs.evolve(s, body=map_expressions(s.body, fn)))
        elif isinstance(s, (Init, Accumulate)):
            out.append(attrs.evolve(s, value=fn(s.value)))
        else:
            out.append(attrs.evolve(s, index=tuple(fn(e) for e in s.index), value=fn(s.value)))
    return tuple(out)


def positional_names(kernel: Kernel) -> dict[str, str]:
    """What ``with_positional_names`` calls each name of ``kernel``: the kernel ``kernel``, its buffers
    ``buffer0``, ``buffer1``, ... and its accumulators ``acc0``, ``acc1``, ... by position (an
    accumulator that fusion inlined is named after its op, and so after its layer)."""
    names = {b.name: f"buffer{i}" for i, b in enumerate(kernel.inputs + kernel.outputs)}
    names.setdefault(kernel.name, "kernel")  # a kernel of partial sums writes a buffer of its own name
    accumulators = dict.fromkeys(s.acc for s in statements(kernel.body) if isinstance(s, Init))
    names.update({acc: f"acc{i}" for i, acc in enumerate(accumulators)})
    return names


def with_positional_names(kernel: Kernel) -> Kernel:
    """``kernel`` with its names by position (``positional_names``): what a schedule estimates does
    not depend on names, so every layer of a model can share one search."""
    names = positional_names(kernel)
    accumulators = {name: positional for name, positional in names.items() if positional.startswith("acc")}

    def rename(node: ex.Expr) -> ex.Expr | None:
        if isinstance(node, Load):
            return attrs.evolve(node, buffer=names[node.buffer])
        return attrs.evolve(node, name=accumulators[node.name]) if isinstance(node, ex.Var) and node.name in accumulators else None

    def statements_renamed(body: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
        return tuple(attrs.evolve(s, buffer=names[s.buffer]) if isinstance(s, Store)
                     else attrs.evolve(s, acc=names[s.acc]) if isinstance(s, (Init, Accumulate))
                     else attrs.evolve(s, body=statements_renamed(s.body)) if isinstance(s, Loop) else s for s in body)

    return Kernel(
        "kernel",
        tuple(attrs.evolve(b, name=names[b.name]) for b in kernel.inputs),
        tuple(attrs.evolve(b, name=names[b.name]) for b in kernel.outputs),
        statements_renamed(map_expressions(kernel.body, lambda e: ex.transform(e, rename))),
    )


def loads(body: tuple[Stmt, ...]) -> Iterator[Load]:
    for s in statements(body):
        for e in expressions(s):
            for node in ex.walk(e):
                if isinstance(node, Load):
                    yield node


# --- printing ----------------------------------------------------------------

def _leaf(e: Expr):
    if isinstance(e, Load):
        return f"{e.buffer}[{', '.join(format_index(i) for i in e.index)}]"
    return None


def format_index(e: Expr) -> str:
    return ex.format_expr(e, _leaf)


def format_value(e: Expr) -> str:
    return ex.format_expr(e, _leaf)


def format_body(body: tuple[Stmt, ...], indent: str) -> list[str]:
    lines = []
    for s in body:
        if isinstance(s, Loop):
            lines.append(f"{indent}for {s.var} in {s.kind}({s.extent}):")
            lines += format_body(s.body, indent + "  ")
        elif isinstance(s, Init):
            lines.append(f"{indent}{s.acc}: {s.value.dtype} = {format_value(s.value)}")
        elif isinstance(s, Accumulate):
            value = format_value(s.value)
            if s.op == "sum":
                lines.append(f"{indent}{s.acc} += {value}")
            elif s.op == "prod":
                lines.append(f"{indent}{s.acc} *= {value}")
            else:
                lines.append(f"{indent}{s.acc} = {s.op}({s.acc}, {value})")
        else:
            idx = ", ".join(format_index(i) for i in s.index)
            lines.append(f"{indent}{s.buffer}[{idx}] = {format_value(s.value)}")
    return lines


def format_kernel(kernel: Kernel, indent: str = "") -> str:
    ins = ", ".join(f"{b.name}: {b.type}" for b in kernel.inputs)
    outs = ", ".join(f"{b.name}: {b.type}" for b in kernel.outputs)
    lines = [f"{indent}kernel {kernel.name}({ins}) -> ({outs}):"]
    lines += format_body(kernel.body, indent + "  ")
    return "\n".join(lines)


def format_program(program: Program) -> str:
    ins = ", ".join(f"{b.name}: {b.type}" for b in program.inputs)
    outs = ", ".join(f"{b.name}: {b.type}" for b in program.outputs)
    lines = [f"loop_program({ins}) -> ({outs}):"]
    for t in program.temporaries:
        unread = "" if t.unread is None else f", unread where {format_value(t.unread)}"
        lines.append(f"  buffer {t.name}: {t.type}{unread}")
    for k in program.kernels:
        lines.append(format_kernel(k, "  "))
    return "\n".join(lines)


# --- verification ------------------------------------------------------------

@functools.lru_cache(maxsize=4096)
def verify_kernel(kernel: Kernel) -> None:
    """Raise VerificationError where ``kernel`` is inconsistent. A kernel never changes, so one
    that passed is not checked again: fusion verifies the whole program after every change."""
    problems: list[str] = []
    buffers = {b.name: b for b in kernel.inputs + kernel.outputs}
    outputs = {b.name for b in kernel.outputs}
    written: set[str] = set()

    def check_expr(e: Expr, ranges: dict[str, int], accs: dict[str, DType]):
        for node in ex.walk(e):
            if isinstance(node, Load):
                _check_access(node.buffer, node.index, ranges, buffers, problems, "reads")
            elif (isinstance(node, ex.Var) and node.name not in ranges and node.name not in accs
                  and not sizes.is_symbol_name(node.name)):
                problems.append(f"{node.name} is used outside the loop or before the accumulator that defines it")

    def visit(body, ranges, accs):
        for s in body:
            if isinstance(s, Loop):
                if s.kind not in LOOP_KINDS:
                    problems.append(f"loop {s.var} has unknown kind {s.kind}")
                if s.var in ranges:
                    problems.append(f"loop variable {s.var} is bound twice")
                visit(s.body, {**ranges, s.var: s.extent}, dict(accs))
            elif isinstance(s, Init):
                check_expr(s.value, ranges, accs)
                accs[s.acc] = s.value.dtype
            elif isinstance(s, Accumulate):
                if s.acc not in accs:
                    problems.append(f"accumulator {s.acc} is used before its Init")
                if s.op not in ACCUMULATE_OPS:
                    problems.append(f"unknown accumulation {s.op}")
                check_expr(s.value, ranges, accs)
            else:
                if s.buffer not in outputs:
                    problems.append(f"store to {s.buffer}, which is not an output of the kernel")
                _check_access(s.buffer, s.index, ranges, buffers, problems, "writes")
                check_expr(s.value, ranges, accs)
                for e in s.index:
                    check_expr(e, ranges, accs)
                written.add(s.buffer)

    visit(kernel.body, {}, {})
    for b in kernel.outputs:
        if b.name not in written:
            problems.append(f"output {b.name} is never written")
    if problems:
        raise VerificationError(f"Loop IR kernel {kernel.name} is inconsistent:\n  " + "\n  ".join(problems))


def _check_access(name, idx, ranges, buffers, problems, verb):
    if name not in buffers:
        problems.append(f"{verb} {name}, which is not a parameter of the kernel")
        return
    shape = buffers[name].type.shape
    if len(idx) != len(shape):
        problems.append(f"{verb} {name} with {len(idx)} coordinates; it has rank {len(shape)}")
        return
    for axis, (e, size) in enumerate(zip(idx, shape)):
        lo, hi = index.bounds(index.affine(e, ranges), ranges)
        if lo is not None and (lo < 0 or isinstance(size, int) and hi >= size):
            problems.append(f"{verb} {name} at coordinate {axis} = {format_index(e)} in [{lo}, {hi}], outside [0, {size - 1}]")


def verify_program(program: Program, unchanged_from: Program | None = None) -> None:
    """Raises ``VerificationError`` where ``program`` is inconsistent. Kernels that are the very
    objects of ``unchanged_from``, a program verified before (fusion's previous step), are not
    walked again: kernels are immutable."""
    verified = {id(k) for k in unchanged_from.kernels} if unchanged_from is not None else set()
    for k in program.kernels:
        if id(k) not in verified:
            verify_kernel(k)
    problems = []
    temporaries = {t.name for t in program.temporaries}
    for b in {b for k in program.kernels for b in k.inputs + k.outputs} | set(program.outputs):
        if b.unread is None:
            continue
        axes = {axis_var(a).name for a in range(len(b.type.shape))}
        if b.name not in temporaries:
            problems.append(f"{b.name} is marked unread where {format_value(b.unread)}, but it is not a temporary")
        if not ex.free_vars(b.unread) <= axes or any(isinstance(n, Load) for n in ex.walk(b.unread)):
            problems.append(f"{b.name} is marked unread where {format_value(b.unread)}: "
                            f"the condition may use only its coordinates {', '.join(sorted(axes))}")
    if problems:
        raise VerificationError("Loop IR program is inconsistent:\n  " + "\n  ".join(problems))

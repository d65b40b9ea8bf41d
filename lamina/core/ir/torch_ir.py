"""Torch IR: the ATen graph as captured, one node per op.

Each node carries the op's name (``aten.mm.default``), its arguments, the shape and
dtype of its result (of each of its results, for an op with several), and the line of
the user's source that produced it. Node
arguments that are tensors are ``Ref``s to earlier nodes or to graph inputs; the
rest are plain Python values (ints, floats, lists of them, dtypes by name).
It prints like an FX graph.
"""

from __future__ import annotations

from typing import Any

import attrs

from lamina.core.errors import VerificationError
from lamina.core.ir.dtypes import DType
from lamina.core.ir.expr import Expr


@attrs.frozen
class SourceLocation:
    file: str
    line: int
    code: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" + (f"  {self.code.strip()}" if self.code else "")


@attrs.frozen
class Ref:
    """A tensor argument: the value named ``name`` (a graph input or an earlier node)."""

    name: str

    def __repr__(self) -> str:
        return self.name


@attrs.frozen
class TensorType:
    shape: tuple["int | Expr", ...] = attrs.field(converter=tuple)
    """Each axis's size: a number, or an expression of symbols known at run time (``s0``)."""
    dtype: DType

    def __str__(self) -> str:
        return f"{self.dtype.short}[{', '.join(map(str, self.shape))}]"


@attrs.frozen
class Input:
    """A graph input. ``kind`` is ``user`` for arguments, ``parameter``/``buffer`` for module state,
    ``constant`` for a tensor folded into the program at compile time."""

    name: str
    type: TensorType
    kind: str = "user"


@attrs.frozen
class Node:
    name: str
    target: str
    args: tuple[Any, ...] = attrs.field(converter=tuple)
    kwargs: tuple[tuple[str, Any], ...] = attrs.field(converter=tuple, default=())
    type: TensorType | None = None
    source: SourceLocation | None = None
    results: tuple[TensorType | None, ...] = attrs.field(converter=tuple, default=())
    """The type of each result of an op with several (None where one is not a tensor)."""

    def kwarg(self, key: str, default: Any = None) -> Any:
        return dict(self.kwargs).get(key, default)


@attrs.frozen
class Graph:
    inputs: tuple[Input, ...] = attrs.field(converter=tuple)
    nodes: tuple[Node, ...] = attrs.field(converter=tuple)
    outputs: tuple[str, ...] = attrs.field(converter=tuple)
    updates: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=tuple)
    """``(input, output)`` for each input the program updates (a key-value cache): ``output`` is
    its new value, which the caller writes into it after the call. The compiled program may write
    it in place instead, where no kernel reads the old value afterwards."""

    def type_of(self, name: str) -> TensorType:
        for inp in self.inputs:
            if inp.name == name:
                return inp.type
        for node in self.nodes:
            if node.name == name:
                if node.type is None:
                    raise KeyError(f"{name} is not a tensor")
                return node.type
        raise KeyError(name)


def _fmt_arg(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_fmt_arg(v) for v in value)
        return f"[{inner}]"
    if isinstance(value, DType):
        return value.name
    if isinstance(value, Expr):
        return str(value)
    return repr(value)


def format_graph(graph: Graph) -> str:
    params = ", ".join(f"{i.name}: {i.type}" for i in graph.inputs)
    lines = [f"graph({params}):"]
    for node in graph.nodes:
        args = [_fmt_arg(a) for a in node.args] + [f"{k}={_fmt_arg(v)}" for k, v in node.kwargs]
        ty = f": {node.type}" if node.type else ""
        if node.results:
            ty = f": ({', '.join(str(t) if t else 'None' for t in node.results)})"
        line = f"    {node.name}{ty} = {node.target}({', '.join(args)})"
        if node.source:
            line = f"{line:<60}  # {node.source.file.rsplit('/', 1)[-1]}:{node.source.line}"
        lines.append(line.rstrip())
    lines.append(f"    return ({', '.join(graph.outputs)},)")
    lines += [f"    update {name} = {output}" for name, output in graph.updates]
    return "\n".join(lines)


def node_refs(node: Node) -> list[Ref]:
    """The tensors ``node`` reads, in argument order."""
    return _refs(node.args) + _refs(tuple(v for _, v in node.kwargs))


def verify_graph(graph: Graph) -> None:
    defined = {i.name for i in graph.inputs}
    problems = []
    for node in graph.nodes:
        for ref in node_refs(node):
            if ref.name not in defined:
                problems.append(f"{node.name} uses {ref.name} before it is defined")
        if node.name in defined:
            problems.append(f"{node.name} is defined twice")
        defined.add(node.name)
    for out in graph.outputs:
        if out not in defined:
            problems.append(f"output {out} is not defined")
    inputs = {i.name: i.type for i in graph.inputs}
    for name, output in graph.updates:
        if name not in inputs or output not in graph.outputs:
            problems.append(f"update {name} = {output} names no input or no output")
        elif graph.type_of(output) != inputs[name]:
            problems.append(f"update {name} = {output}: the new value is {graph.type_of(output)}, the input {inputs[name]}")
    if problems:
        raise VerificationError("Torch IR is inconsistent:\n  " + "\n  ".join(problems))


def _refs(values) -> list[Ref]:
    found = []
    for v in values:
        if isinstance(v, Ref):
            found.append(v)
        elif isinstance(v, (list, tuple)):
            found.extend(_refs(v))
    return found

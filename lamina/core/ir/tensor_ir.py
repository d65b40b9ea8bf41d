"""Tensor IR: every op as one of three primitives.

- ``Elementwise``: a scalar function (an expression over ``Arg`` leaves) applied to
  inputs of the output's exact shape. Broadcasting happens before, in an IndexMap.
  With no inputs it is a filled tensor (``zeros``, ``full``).
- ``Reduction``: combine along axes with ``sum``, ``max``, ``min`` or ``prod``.
- ``IndexMap``: each output coordinate ``(d0, d1, ...)`` reads the input at an integer
  expression of those coordinates: broadcast, transpose, permute, view, slice. The
  expression may read integers from further tensors (``Gathered``): an embedding
  lookup reads row ``ids[d0, d1]``.

An Elementwise function may also use its output coordinates (``Coord``), which is
what ``arange``, triangular masks and ``cat`` (a ``where`` on a coordinate) need.

Nothing below this level knows about ATen.
"""

from __future__ import annotations

import math

import attrs

from lamina.core.errors import VerificationError
from lamina.core.ir import dtypes, expr as ex, index, sizes
from lamina.core.ir.dtypes import DType
from lamina.core.ir.expr import Expr
from lamina.core.ir.torch_ir import SourceLocation, TensorType


@attrs.frozen(eq=True)
class Arg(Expr):
    """The ``position``-th input of an Elementwise function."""

    position: int
    dtype: DType


@attrs.frozen(eq=True)
class Coord(Expr):
    """The output coordinate along ``axis`` of the Elementwise op that holds it."""

    axis: int
    dtype: DType = dtypes.index


@attrs.frozen(eq=True)
class Gathered(Expr):
    """``IndexMap.gathers[position]`` read at ``index``: an index that comes from a tensor."""

    position: int
    index: tuple[Expr, ...] = attrs.field(converter=tuple)
    dtype: DType = dtypes.index

    def children(self):
        return self.index

    def rebuild(self, children):
        return attrs.evolve(self, index=tuple(children))


REDUCTIONS = ("sum", "max", "min", "prod")


def reduction_identity(op: str, dtype: DType) -> float | int | bool:
    """The value a reduction starts from: combining it with x gives x."""
    if op == "sum":
        return 0.0 if dtype.is_float else 0
    if op == "prod":
        return 1.0 if dtype.is_float else 1
    if op == "max":
        return -math.inf if dtype.is_float else -(2**63)
    if op == "min":
        return math.inf if dtype.is_float else 2**63 - 1
    raise ValueError(f"unknown reduction {op!r}; known: {', '.join(REDUCTIONS)}")


def output_vars(rank: int) -> tuple[ex.Var, ...]:
    """The coordinate variables of an IndexMap's output: d0, d1, ..."""
    return tuple(ex.Var(f"d{i}") for i in range(rank))


@attrs.frozen
class Value:
    """A named tensor: a program input or the result of an op."""

    name: str
    type: TensorType
    kind: str = "user"  # user | parameter | buffer | constant | intermediate


@attrs.frozen
class Elementwise:
    name: str
    inputs: tuple[str, ...] = attrs.field(converter=tuple)
    fn: Expr
    type: TensorType
    source: SourceLocation | None = attrs.field(default=None, eq=False)


@attrs.frozen
class Reduction:
    name: str
    input: str
    axes: tuple[int, ...] = attrs.field(converter=tuple)
    op: str
    keepdim: bool
    type: TensorType
    source: SourceLocation | None = attrs.field(default=None, eq=False)


@attrs.frozen
class IndexMap:
    name: str
    input: str
    index: tuple[Expr, ...] = attrs.field(converter=tuple)
    type: TensorType
    source: SourceLocation | None = attrs.field(default=None, eq=False)
    #: Integer tensors that ``Gathered`` leaves of ``index`` read.
    gathers: tuple[str, ...] = attrs.field(converter=tuple, default=())


TensorOp = Elementwise | Reduction | IndexMap


def op_inputs(o: TensorOp) -> tuple[str, ...]:
    if isinstance(o, Elementwise):
        return o.inputs
    if isinstance(o, IndexMap):
        return (o.input,) + o.gathers
    return (o.input,)


@attrs.frozen
class Program:
    inputs: tuple[Value, ...] = attrs.field(converter=tuple)
    ops: tuple[TensorOp, ...] = attrs.field(converter=tuple)
    outputs: tuple[str, ...] = attrs.field(converter=tuple)

    def types(self) -> dict[str, TensorType]:
        found = {v.name: v.type for v in self.inputs}
        found.update({o.name: o.type for o in self.ops})
        return found


# --- printing ----------------------------------------------------------------

def _elementwise_text(o: Elementwise) -> str:
    names = o.inputs

    def leaf(e):
        if isinstance(e, Arg):
            return names[e.position]
        if isinstance(e, Coord):
            return f"d{e.axis}"
        return None

    return ex.format_expr(o.fn, leaf)


def format_op(o: TensorOp) -> str:
    head = f"{o.name}: {o.type} = "
    if isinstance(o, Elementwise):
        return head + f"elementwise {_elementwise_text(o)}"
    if isinstance(o, Reduction):
        axes = ", ".join(map(str, o.axes))
        keep = ", keepdim" if o.keepdim else ""
        return head + f"reduce {o.op}({o.input}, axes=[{axes}]{keep})"
    coords = ", ".join(v.name for v in output_vars(len(o.type.shape)))

    def leaf(e):
        if isinstance(e, Gathered):
            return f"{o.gathers[e.position]}[{', '.join(ex.format_expr(i, leaf) for i in e.index)}]"
        return None

    idx = ", ".join(ex.format_expr(e, leaf) for e in o.index)
    return head + f"index_map ({coords}) -> {o.input}[{idx}]"


def format_program(program: Program) -> str:
    params = ", ".join(f"{v.name}: {v.type}" for v in program.inputs)
    lines = [f"tensor_program({params}):"]
    lines += [f"    {format_op(o)}" for o in program.ops]
    lines.append(f"    return ({', '.join(program.outputs)},)")
    return "\n".join(lines)


# --- verification ------------------------------------------------------------

def verify_program(program: Program) -> None:
    """Check names, shapes, dtypes and, where they are static, index bounds."""
    types = {v.name: v.type for v in program.inputs}
    problems: list[str] = []
    foreign: set[str] = set()
    for o in program.ops:
        if not isinstance(o, (Elementwise, Reduction, IndexMap)):
            name = getattr(o, "name", repr(o))
            problems.append(f"{name}: a {type(o).__name__} is not a Tensor IR primitive; "
                            "write the op with Elementwise, Reduction and IndexMap")
            foreign.add(name)
            continue
        if foreign.intersection(op_inputs(o)):
            foreign.add(o.name)
            continue
        where = f"{o.name}" + (f" (from {o.source})" if o.source else "")
        for name in op_inputs(o):
            if name not in types:
                problems.append(f"{where}: input {name} is not defined before use")
        if any(n not in types for n in op_inputs(o)):
            types[o.name] = o.type
            continue
        if isinstance(o, Elementwise):
            problems += [f"{where}: {p}" for p in _check_elementwise(o, types)]
        elif isinstance(o, Reduction):
            problems += [f"{where}: {p}" for p in _check_reduction(o, types[o.input])]
        else:
            problems += [f"{where}: {p}" for p in _check_index_map(o, types[o.input])]
        if o.name in types:
            problems.append(f"{where}: the name is defined twice")
        types[o.name] = o.type
    for out in program.outputs:
        if out not in types and out not in foreign:
            problems.append(f"output {out} is not defined")
    if problems:
        raise VerificationError("Tensor IR is inconsistent:\n  " + "\n  ".join(problems))


def _check_elementwise(o: Elementwise, types) -> list[str]:
    problems = []
    for name in o.inputs:
        if types[name].shape != o.type.shape:
            problems.append(
                f"input {name} has shape {types[name].shape}, the output {o.type.shape}; "
                "broadcast it with an IndexMap first"
            )
    for node in ex.walk(o.fn):
        if isinstance(node, Arg):
            if node.position >= len(o.inputs):
                problems.append(f"the function reads argument {node.position} of {len(o.inputs)}")
            elif node.dtype != types[o.inputs[node.position]].dtype:
                problems.append(f"argument {node.position} is typed {node.dtype}, its input is {types[o.inputs[node.position]].dtype}")
        elif isinstance(node, Coord) and not 0 <= node.axis < len(o.type.shape):
            problems.append(f"the function reads coordinate {node.axis} of a rank-{len(o.type.shape)} output")
        elif isinstance(node, ex.Var) and not sizes.is_symbol_name(node.name):
            problems.append(f"the function uses a variable {node.name}; Elementwise functions see only their "
                            "arguments, coordinates and sizes")
        elif isinstance(node, ex.Op) and node.op not in ex.OPS:
            problems.append(f"unknown scalar op {node.op}")
    if o.fn.dtype != o.type.dtype:
        problems.append(f"the function computes {o.fn.dtype}, the output is declared {o.type.dtype}")
    return problems


def _check_reduction(o: Reduction, inp: TensorType) -> list[str]:
    rank = len(inp.shape)
    if o.op not in REDUCTIONS:
        return [f"unknown reduction {o.op}"]
    if any(a < 0 or a >= rank for a in o.axes) or len(set(o.axes)) != len(o.axes):
        return [f"axes {o.axes} are not distinct axes of a rank-{rank} input"]
    expected = tuple(
        (1 if o.keepdim else None) if d in o.axes else s for d, s in enumerate(inp.shape)
    )
    expected = tuple(s for s in expected if s is not None)
    if expected != o.type.shape:
        return [f"reducing {inp.shape} over {o.axes} gives {expected}, not {o.type.shape}"]
    return []


def _check_index_map(o: IndexMap, inp: TensorType) -> list[str]:
    problems = []
    if len(o.index) != len(inp.shape):
        return [f"the index has {len(o.index)} coordinates, the input has rank {len(inp.shape)}"]
    if o.type.dtype != inp.dtype:
        problems.append(f"an IndexMap does not change dtype ({inp.dtype} -> {o.type.dtype})")
    ranges = {f"d{i}": s for i, s in enumerate(o.type.shape)}
    allowed = set(ranges)
    for e in o.index:
        for node in ex.walk(e):
            if isinstance(node, Gathered) and not 0 <= node.position < len(o.gathers):
                problems.append(f"the index reads gathered tensor {node.position} of {len(o.gathers)}")
    for axis, (e, size) in enumerate(zip(o.index, inp.shape)):
        stray = {name for name in ex.free_vars(e) - allowed if not sizes.is_symbol_name(name)}
        if stray:
            problems.append(f"coordinate {axis} uses unknown variables {sorted(stray)}")
            continue
        if sizes.is_empty(o.type.shape):
            continue
        lo, hi = index.bounds(index.affine(e, ranges), ranges)
        if lo is not None and (lo < 0 or isinstance(size, int) and hi >= size):
            problems.append(f"coordinate {axis} = {e} ranges over [{lo}, {hi}], outside [0, {size - 1}]")
    return problems


def num_elements(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


__all__ = [
    "Arg", "Coord", "Gathered", "Value", "Elementwise", "Reduction", "IndexMap", "TensorOp", "Program",
    "REDUCTIONS", "reduction_identity", "output_vars", "op_inputs", "format_op",
    "format_program", "verify_program", "num_elements", "dtypes",
]

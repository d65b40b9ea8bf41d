"""Runs Tensor IR with PyTorch CPU operations, one primitive at a time.

It is the reference that decompositions are checked against: every Elementwise
function is evaluated over whole tensors through ``scalar_ops`` (the one definition
of each scalar operator), every Reduction with the matching PyTorch reduction, and
every IndexMap by evaluating its index expressions on grids of output coordinates
and gathering. Output coordinates (``Coord``) are grids over the output's shape, and
gathered indices (``Gathered``) are read from their tensors at the grid points. An
index outside the input is an error here, never a silent wrap.
"""

from __future__ import annotations

import math
from typing import Mapping

import torch

from lamina.core.errors import InputMismatchError, LaminaError
from lamina.core.ir import dtypes, expr as ex, tensor_ir
from lamina.core.ir.tensor_ir import Arg, Coord, Elementwise, Gathered, IndexMap, Reduction, TensorOp
from lamina.backends.reference.scalar_ops import apply_op, as_tensor, torch_dtype


def interpret(program: tensor_ir.Program, inputs: Mapping[str, torch.Tensor]) -> list[torch.Tensor]:
    """The program's outputs for ``inputs`` (program input name -> tensor), computed on the CPU."""
    values: dict[str, torch.Tensor] = {}
    for spec in program.inputs:
        if spec.name not in inputs:
            raise InputMismatchError(f"no tensor given for program input {spec.name} ({spec.type})")
        values[spec.name] = _checked_input(spec, inputs[spec.name])
    for op in program.ops:
        result = _run(op, values)
        values[op.name] = result.to(torch_dtype(op.type.dtype)).reshape(op.type.shape).contiguous()
    return [values[name] for name in program.outputs]


def _checked_input(spec: tensor_ir.Value, tensor: torch.Tensor) -> torch.Tensor:
    want = spec.type
    if tuple(tensor.shape) != want.shape or tensor.dtype != torch_dtype(want.dtype):
        got = f"{str(tensor.dtype).removeprefix('torch.')}{list(tensor.shape)}"
        raise InputMismatchError(f"program input {spec.name} is {want}, but the tensor given is {got}")
    return tensor.detach().cpu()


def _run(op: TensorOp, values: dict[str, torch.Tensor]) -> torch.Tensor:
    if isinstance(op, Elementwise):
        result = _evaluate(op.fn, [values[name] for name in op.inputs], op.type.shape)
        return torch.broadcast_to(as_tensor(result, op.type.dtype), op.type.shape)
    if isinstance(op, Reduction):
        return _reduce(op, values[op.input])
    return _gather(op, values[op.input], [values[name] for name in op.gathers])


def _grid(shape: tuple[int, ...], axis: int) -> torch.Tensor:
    """The coordinate along ``axis`` at every point of ``shape``."""
    view = [1] * len(shape)
    view[axis] = shape[axis]
    return torch.arange(shape[axis], dtype=torch.int64).reshape(view)


def _evaluate(e: ex.Expr, args: list[torch.Tensor], shape: tuple[int, ...]) -> torch.Tensor:
    if isinstance(e, Arg):
        return args[e.position]
    if isinstance(e, Coord):
        return _grid(shape, e.axis)
    if isinstance(e, ex.Const):
        return as_tensor(e.value, e.dtype)
    if isinstance(e, ex.Op):
        return apply_op(e.op, [_evaluate(a, args, shape) for a in e.args], e.dtype)
    raise LaminaError(f"an Elementwise function contains {e!r}, which the interpreter cannot evaluate")


_REDUCE = {"sum": torch.sum, "max": torch.amax, "min": torch.amin}


def _reduce(op: Reduction, x: torch.Tensor) -> torch.Tensor:
    if not op.axes:
        return x
    if op.op == "prod":
        result = x
        for axis in sorted(op.axes, reverse=True):
            result = torch.prod(result, dim=axis, keepdim=True)
        return result if op.keepdim else result.reshape(op.type.shape)
    if op.op not in _REDUCE:
        raise LaminaError(f"{op.name}: unknown reduction {op.op!r}; known: {', '.join(tensor_ir.REDUCTIONS)}")
    return _REDUCE[op.op](x, dim=op.axes, keepdim=op.keepdim)


def _gather(op: IndexMap, x: torch.Tensor, gathers: list[torch.Tensor]) -> torch.Tensor:
    """Index expressions evaluated on broadcastable coordinate grids, checked, then one advanced indexing."""
    shape = op.type.shape
    coordinates = {v.name: _grid(shape, axis) for axis, v in enumerate(tensor_ir.output_vars(len(shape)))}
    index = []
    for axis, (e, size) in enumerate(zip(op.index, x.shape)):
        position = _index_value(e, coordinates, op, gathers)
        if math.prod(shape) and (int(position.min()) < 0 or int(position.max()) >= size):
            raise LaminaError(
                f"{op.name} reads {op.input} at coordinate {axis} = {e}, which reaches "
                f"[{int(position.min())}, {int(position.max())}] outside [0, {size - 1}]"
                + (f" (from {op.source})" if op.source else "")
            )
        index.append(position)
    if not index:
        return x.expand(shape)
    return torch.broadcast_to(x[tuple(index)], shape)


def _index_value(e: ex.Expr, coordinates: dict[str, torch.Tensor], op: IndexMap,
                 gathers: list[torch.Tensor]) -> torch.Tensor:
    if isinstance(e, ex.Var):
        return coordinates[e.name]
    if isinstance(e, ex.Const):
        return as_tensor(e.value, dtypes.index)
    if isinstance(e, Gathered):
        return _read_gathered(e, coordinates, op, gathers)
    if isinstance(e, ex.Op):
        return apply_op(e.op, [_index_value(a, coordinates, op, gathers) for a in e.args], e.dtype)
    raise LaminaError(f"an index expression contains {e!r}, which the interpreter cannot evaluate")


def _read_gathered(e: Gathered, coordinates, op: IndexMap, gathers: list[torch.Tensor]) -> torch.Tensor:
    """``gathers[e.position]`` at ``e.index``, as int64, checking that every read is inside it."""
    source = gathers[e.position]
    points = [_index_value(i, coordinates, op, gathers) for i in e.index]
    if len(points) != source.dim():
        raise LaminaError(f"{op.name} reads {op.gathers[e.position]} (rank {source.dim()}) with {len(points)} indices")
    points = torch.broadcast_tensors(*points) if points else []
    for axis, (p, size) in enumerate(zip(points, source.shape)):
        if p.numel() and (int(p.min()) < 0 or int(p.max()) >= size):
            raise LaminaError(f"{op.name} reads {op.gathers[e.position]} at coordinate {axis} outside [0, {size - 1}]")
    return source[tuple(points)].to(torch.int64) if points else source.to(torch.int64)

"""Writes at a tensor of indices: ``index_put`` along one axis, as a key-value cache is updated.

A static key-value cache (Hugging Face's ``StaticCache``) writes each step's keys at
``cache_position`` with ``index_copy_``, which reaches lamina as ``index_put(cache, [None,
None, positions], keys)``. Tensor IR has no scatter, so the write is read the other way
round: for each position ``p`` of the axis, the last ``j`` with ``positions[j] == p`` (a max
reduction over the few written positions, -1 where none is), and the output reads
``values[..., j, ...]`` there and the input elsewhere (a gather and a ``where``); one written
position is compared with the coordinate directly. Where one
position is written twice, the later write wins, as in eager PyTorch on the CPU. With
``accumulate=True`` (an embedding's gradient) each position adds every value written to it: a
sum over the written positions of those that land there. Negative positions count from the end.
"""

from __future__ import annotations

import math

from lamina.core.ir import dtypes, expr as ex, tensor_ir
from lamina.core.ir.tensor_builder import TensorBuilder
from lamina.core.ir.tensor_ir import Arg, Coord, Gathered
from lamina.core.ir.torch_ir import Node
from lamina.plugins.ops.arguments import argument, tensor


def decompose_index_put(b: TensorBuilder, node: Node) -> str:
    """``index_put(x, indices, values, accumulate)`` with one index tensor (of any shape: its
    positions are taken in order)."""
    x = tensor(b, node)
    shape = b.shape(x)
    given = list(argument(node, 1, "indices"))
    indexed = [k for k, i in enumerate(given) if i is not None]
    if len(indexed) != 1:
        raise b.fail(f"index_put with {len(indexed)} index tensors; lamina writes along one axis at a time "
                     "(x[..., positions, ...] = values)")
    axis = indexed[0]
    positions = b.value(given[axis])
    grid_shape = b.shape(positions)
    count, length = math.prod(grid_shape), shape[axis]
    values = b.broadcast_to(b.cast(b.value(argument(node, 2, "values")), b.dtype(x)),
                            shape[:axis] + grid_shape + shape[axis + 1:], role="values")
    if len(grid_shape) != 1:
        positions = b.reshape(positions, (count,))
        values = b.reshape(values, shape[:axis] + (count,) + shape[axis + 1:])
    index_type = b.dtype(positions)
    wrapped = ex.op("where", ex.op("lt", Arg(0, index_type), 0), Arg(0, index_type) + length, Arg(0, index_type))
    wrapped_positions = b.elementwise(wrapped, [positions], role="positions")
    if argument(node, 3, "accumulate", False):
        return b.binary("add", x, _added(b, wrapped_positions, values, axis, shape), role="index_put")
    if count == 1:
        return _one_position(b, x, wrapped_positions, values, axis, shape)
    grid = b.broadcast_to(wrapped_positions, (length, count), role="positions")
    match = ex.op("where", ex.op("eq", Arg(0, index_type), ex.cast(Coord(0), index_type)),
                  ex.cast(Coord(1), dtypes.int64), ex.const(-1, dtypes.int64))
    last = b.reduction(b.elementwise(match, [grid], role="writers"), [1], "max", role="last_writer")
    d = tensor_ir.output_vars(len(shape))
    found = Gathered(0, (d[axis],))
    index = list(d)
    index[axis] = ex.op("where", ex.op("lt", found, 0), ex.const(0), found)
    read = b.index_map(values, index, shape, gathers=[last], role="written")
    at = b.index_map(last, [d[axis]], shape, role="last_writer")
    return b.where(b.binary("ge", at, 0), read, x, role="index_put")


def _one_position(b: TensorBuilder, x: str, position: str, values: str, axis: int, shape: tuple[int, ...]) -> str:
    """One written position (a decoding step's): ``where(coordinate == position, values, x)``, which
    an in-place update of ``x`` turns into a store of the written row alone."""
    index_type = b.dtype(position)
    d = tensor_ir.output_vars(len(shape))
    spread = b.index_map(position, [0], shape, role="position")
    here = b.elementwise(ex.op("eq", ex.cast(Coord(axis), index_type), Arg(0, index_type)), [spread], role="written")
    index = list(d)
    index[axis] = ex.const(0)
    return b.where(here, b.index_map(values, index, shape, role="written"), x, role="index_put")


def _added(b: TensorBuilder, positions: str, values: str, axis: int, shape: tuple[int, ...]) -> str:
    """For each element of the output, the sum of the values written to it."""
    d = tensor_ir.output_vars(len(shape) + 1)
    written = d[-1]
    spread = shape + (b.shape(positions)[0],)
    position = b.index_map(positions, [written], spread, role="positions")
    value = b.index_map(values, [*d[:axis], written, *d[axis + 1:-1]], spread, role="values")
    index_type = b.dtype(positions)
    landing = ex.op("where", ex.op("eq", Arg(0, index_type), ex.cast(Coord(axis), index_type)),
                    Arg(1, b.dtype(values)), ex.const(0, b.dtype(values)))
    return b.reduction(b.elementwise(landing, [position, value], role="landing"), [len(shape)], "sum",
                       role="added")


DECOMPOSITIONS = {
    "aten.index_put.default": decompose_index_put,
}

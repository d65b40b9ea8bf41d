"""Writes at a tensor of indices: ``index_put`` along one axis, as a key-value cache is updated;
and writes into a slice, ``slice_scatter`` (``y[:, 1:4] = z`` on a copy).

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
A boolean mask for an index (``x[mask] = value``, a padding mask filled) is a ``where``: the
value, which must not depend on how many elements the mask holds, wherever the mask is true.
A slice written is a ``where`` too: the source inside the slice, read at ``(i - start) // step``,
the tensor elsewhere.
"""

from __future__ import annotations

import math

from lamina.core.errors import SymbolicSizeError
from lamina.core.ir import dtypes, expr as ex, sizes, tensor_ir
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
    if b.dtype(positions) == dtypes.bool_:
        return _under_mask(b, node, x, positions, axis)
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


def _under_mask(b: TensorBuilder, node: Node, x: str, mask: str, axis: int) -> str:
    """``x[..., mask] = values``: ``values`` where the mask (over the axes from ``axis`` on) is true,
    ``x`` elsewhere (adding ``values`` there with ``accumulate``). PyTorch writes one value per true
    element, so ``values`` must broadcast over them: a single value, or one per element of the axes
    after the mask's."""
    shape, covered = b.shape(x), b.shape(mask)
    if tuple(shape[axis:axis + len(covered)]) != tuple(covered):
        raise b.fail(f"index_put with a boolean mask of shape {tuple(covered)} at axis {axis} of a tensor of "
                     f"shape {tuple(shape)}: the mask must have the shape of the axes it indexes")
    values = b.value(argument(node, 2, "values"))
    given = list(b.shape(values))
    while given and given[0] == 1:
        given.pop(0)
    rest = shape[axis + len(covered):]
    if len(given) > len(rest) or any(g not in (1, r) for g, r in zip(given, rest[len(rest) - len(given):])):
        raise b.fail(f"index_put with a boolean mask writes values of shape {tuple(b.shape(values))}, one per true "
                     "element of the mask, a count known only at run time; lamina writes one value under a mask "
                     "(x[mask] = value), or one per element of the axes after the mask's")
    spread = b.broadcast_to(b.cast(b.reshape(values, tuple(given)), b.dtype(x)), shape, role="values")
    d = tensor_ir.output_vars(len(shape))
    where = b.index_map(mask, d[axis:axis + len(covered)], shape, role="mask")
    if argument(node, 3, "accumulate", False):
        spread = b.binary("add", x, spread, role="values")
    return b.where(where, spread, x, role="index_put")


def decompose_slice_scatter(b: TensorBuilder, node: Node) -> str:
    """``slice_scatter(x, source, dim, start, end, step)``, the value of ``x[..., start:end:step, ...] =
    source`` written into a copy of ``x``."""
    x, source = tensor(b, node), tensor(b, node, 1, "src")
    shape = b.shape(x)
    dim = b.axis(argument(node, 2, "dim", 0), len(shape))
    start, end = argument(node, 3, "start"), argument(node, 4, "end")
    if sizes.is_symbolic((shape[dim], start, end)):
        raise SymbolicSizeError(f"a slice from {start} to {end} of an axis of {shape[dim]} written, with a bound "
                                "known only at run time")
    first, stop, step = slice(start, end, argument(node, 5, "step", 1)).indices(shape[dim])
    count = len(range(first, stop, step))
    if b.shape(source)[dim] != count:
        raise b.fail(f"slice_scatter writes {b.shape(source)[dim]} elements into a slice of {count}")
    source = b.cast(source, b.dtype(x))
    if count == shape[dim]:
        return source
    if count == 0:
        return x
    c = Coord(dim)
    inside = ex.op("and", ex.op("ge", c, first), ex.op("lt", c, stop))
    if step != 1:
        inside = ex.op("and", inside, ex.op("eq", ex.op("mod", ex.op("sub", c, first), step), 0))
    d = tensor_ir.output_vars(len(shape))
    index = list(d)
    index[dim] = ex.op("where", ex.op("lt", d[dim], first), ex.const(0),
                       ex.op("min", (d[dim] - first) // step, count - 1))
    written = b.index_map(source, index, shape, role="written")
    return b.where(b.elementwise(inside, [], shape, role="in_slice"), written, x, role="slice_scatter")


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
    "aten.slice_scatter.default": decompose_slice_scatter,
}

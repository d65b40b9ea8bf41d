"""Views: each is one IndexMap that reads the input at an affine function of the output coordinates.

``split``, ``split_with_sizes`` and ``unbind`` (what ``chunk`` and a fused projection's
``split`` lower to) give one view per piece: slices, never copies.
"""

from __future__ import annotations

from lamina.core.ir import sizes, tensor_ir
from lamina.core.ir.shapes import dense_order, reads_within
from lamina.core.ir.tensor_builder import TensorBuilder
from lamina.core.ir.torch_ir import Node
from lamina.plugins.ops.arguments import argument, tensor


def decompose_view(b: TensorBuilder, node: Node) -> str:
    """A size of -1 is the one the frontend traced, where sizes are symbolic: inferring it divides
    products of symbols (``s0 * s0 * 8 // (s0 * 8)``), which lamina cannot always cancel."""
    size = list(argument(node, 1, "size"))
    if -1 in size and node.type is not None and sizes.is_symbolic(tuple(node.type.shape)):
        size[size.index(-1)] = node.type.shape[size.index(-1)]
    return b.reshape(tensor(b, node), size)


def decompose_permute(b: TensorBuilder, node: Node) -> str:
    return b.permute(tensor(b, node), argument(node, 1, "dims"))


def decompose_transpose(b: TensorBuilder, node: Node) -> str:
    return b.transpose(tensor(b, node), argument(node, 1, "dim0"), argument(node, 2, "dim1"))


def decompose_t(b: TensorBuilder, node: Node) -> str:
    x = tensor(b, node)
    return b.transpose(x, 0, 1) if len(b.shape(x)) == 2 else x


def decompose_expand(b: TensorBuilder, node: Node) -> str:
    return b.expand(tensor(b, node), argument(node, 1, "size"))


def decompose_unsqueeze(b: TensorBuilder, node: Node) -> str:
    return b.unsqueeze(tensor(b, node), argument(node, 1, "dim"))


def decompose_squeeze(b: TensorBuilder, node: Node) -> str:
    return b.squeeze(tensor(b, node), argument(node, 1, "dim"))


def decompose_slice(b: TensorBuilder, node: Node) -> str:
    x, dim = tensor(b, node), argument(node, 1, "dim", 0)
    return b.slice(x, dim, argument(node, 2, "start"), argument(node, 3, "end"), argument(node, 4, "step", 1),
                   length=node.type.shape[b.axis(dim, len(b.shape(x)))])


def decompose_repeat(b: TensorBuilder, node: Node) -> str:
    return b.repeat(tensor(b, node), argument(node, 1, "repeats"))


def decompose_select(b: TensorBuilder, node: Node) -> str:
    return b.select(tensor(b, node), argument(node, 1, "dim"), argument(node, 2, "index"))


def decompose_flip(b: TensorBuilder, node: Node) -> str:
    """``torch.flip``: each flipped axis read from its end."""
    x = tensor(b, node)
    shape = b.shape(x)
    flipped = {b.axis(dim, len(shape)) for dim in argument(node, 1, "dims")}
    d = tensor_ir.output_vars(len(shape))
    return b.index_map(x, [shape[k] - 1 - d[k] if k in flipped else d[k] for k in range(len(shape))], shape,
                       role="flip")


def decompose_as_strided(b: TensorBuilder, node: Node) -> str:
    """``as_strided(x, size, stride, offset)``: element ``i`` is the one that eager's ``x`` holds at storage
    position ``offset + sum(i * stride)`` (overlapping windows, Longformer's chunks). The frontend gives the
    strides and offset that ``x`` had in eager (``input_strides``, ``input_storage_offset``); with its
    elements dense in some order of its axes, each position is one element, whose coordinates the
    position's quotients give."""
    x = tensor(b, node)
    shape, strides = b.shape(x), node.kwarg("input_strides")
    size, stride = list(argument(node, 1, "size")), list(argument(node, 2, "stride"))
    base = node.kwarg("input_storage_offset", 0)
    offset = argument(node, 3, "storage_offset")
    first = (base if offset is None else offset) - base
    if strides is None or sizes.is_symbolic(tuple(shape) + tuple(size) + tuple(stride)) \
            or dense_order(shape, strides) is None or not reads_within(sizes.numel(shape), size, stride, first):
        raise b.fail(f"as_strided reads {x} by its storage, and lamina knows it only where eager lays {x} out "
                     "densely with sizes and strides that are numbers, and reads none of the storage around it; "
                     "run it in PyTorch (the eager fallback)")
    d = tensor_ir.output_vars(len(size))
    position = sum((v * s for v, s in zip(d, stride)), first)
    coordinates = [0 if extent == 1 else (position // step) % extent for extent, step in zip(shape, strides)]
    return b.index_map(x, coordinates, size, role="as_strided")


def _pieces(b: TensorBuilder, x: str, dim: int, sizes) -> tuple[str, ...]:
    total = b.shape(x)[b.axis(dim, len(b.shape(x)))]
    if sum(sizes) != total or any(size < 0 for size in sizes):
        raise b.fail(f"cannot split an axis of {total} into pieces of {list(sizes)}")
    starts = [sum(sizes[:k]) for k in range(len(sizes))]
    return tuple(b.slice(x, dim, start, start + size) for start, size in zip(starts, sizes))


def decompose_split_with_sizes(b: TensorBuilder, node: Node) -> tuple[str, ...]:
    return _pieces(b, tensor(b, node), argument(node, 2, "dim", 0), list(argument(node, 1, "split_sizes")))


def decompose_split(b: TensorBuilder, node: Node) -> tuple[str, ...]:
    """Pieces of ``split_size`` along ``dim``, the last one shorter if the size does not divide."""
    x, size, dim = tensor(b, node), argument(node, 1, "split_size"), argument(node, 2, "dim", 0)
    total = b.shape(x)[b.axis(dim, len(b.shape(x)))]
    if size <= 0 and total:
        raise b.fail(f"split needs a positive piece size, not {size}")
    return _pieces(b, x, dim, [min(size, total - start) for start in range(0, total, size)] or [0])


def decompose_unbind(b: TensorBuilder, node: Node) -> tuple[str, ...]:
    x, dim = tensor(b, node), argument(node, 1, "dim", 0)
    return tuple(b.select(x, dim, k) for k in range(b.shape(x)[b.axis(dim, len(b.shape(x)))]))


DECOMPOSITIONS = {
    "aten.as_strided.default": decompose_as_strided,
    "aten.split_with_sizes.default": decompose_split_with_sizes,
    "aten.split.Tensor": decompose_split,
    "aten.unbind.int": decompose_unbind,
    "aten.view.default": decompose_view,
    "aten._unsafe_view.default": decompose_view,
    "aten.permute.default": decompose_permute,
    "aten.transpose.int": decompose_transpose,
    "aten.t.default": decompose_t,
    "aten.expand.default": decompose_expand,
    "aten.unsqueeze.default": decompose_unsqueeze,
    "aten.squeeze.default": decompose_squeeze,
    "aten.squeeze.dim": decompose_squeeze,
    "aten.squeeze.dims": decompose_squeeze,
    "aten.slice.Tensor": decompose_slice,
    "aten.select.int": decompose_select,
    "aten.repeat.default": decompose_repeat,
    "aten.flip.default": decompose_flip,
}

"""Max and average pooling over windows of an image.

One IndexMap gathers each output position's window of the padded input into a last
axis, which one Reduction combines: windows are read where they lie, never stored.
The last two axes are the image's; any before them (batch, channels) are carried.

- ``max_pool2d_with_indices`` pads with the smallest value, so that the border never
  wins; its indices (the first maximum of each window, as a flat position in the
  input's plane) are a ``min`` over the window's positions where it holds the maximum,
  built only if the program reads them.
- ``avg_pool2d`` pads with zeros and divides each sum by its window's count, computed
  from the output coordinates as PyTorch counts it (``count_include_pad``) or by
  ``divisor_override``.
- ``_adaptive_avg_pool2d``: output ``i`` averages input ``floor(i * in / out)`` up to
  ``ceil((i + 1) * in / out)``, windows of unequal size: each is gathered at the size
  of the largest and masked past its own end.

With ``ceil_mode`` the last window may hang past the padding; the input is padded (or
cropped) to exactly what the windows read.
"""

from __future__ import annotations

import math

from lamina.core.ir import dtypes, expr as ex, tensor_ir
from lamina.core.ir.expr import Expr
from lamina.core.ir.tensor_builder import TensorBuilder, compute_dtype
from lamina.core.ir.tensor_ir import Arg, Coord
from lamina.core.ir.torch_ir import Node
from lamina.plugins.ops.arguments import argument, tensor
from lamina.plugins.ops.convolution import per_axis
from lamina.plugins.ops.padding import pad


def _image(b: TensorBuilder, x: str, what: str) -> tuple[int, int]:
    """The image's height and width, the last two axes of ``x``."""
    shape = b.shape(x)
    if len(shape) not in (3, 4):
        raise b.fail(f"{what} needs a (C, H, W) or (N, C, H, W) input, {x} has shape {list(shape)}")
    return shape[-2], shape[-1]


def _pooled_size(size: int, kernel: int, stride: int, padding: int, dilation: int, ceil_mode: bool) -> int:
    """PyTorch's ``pooling_output_shape``: with ``ceil_mode`` a last window that starts in the
    right padding is dropped."""
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    out = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1
    return out


def _window_settings(b: TensorBuilder, node: Node, x: str, what: str, dilation, ceil_mode: bool):
    """kernel, stride, padding, dilation and output sizes, checked as PyTorch checks them."""
    spatial = _image(b, x, what)
    kernel = per_axis(b, argument(node, 1, "kernel_size"), 2, "kernel_size")
    stride = per_axis(b, argument(node, 2, "stride") or kernel, 2, "stride")
    padding = per_axis(b, argument(node, 3, "padding", 0), 2, "padding")
    dilation = per_axis(b, dilation, 2, "dilation")
    if min(kernel + stride + dilation) <= 0 or min(padding) < 0:
        raise b.fail(f"{what} needs positive kernel sizes, strides and dilations and no negative padding, got "
                     f"kernel {kernel}, stride {stride}, padding {padding}, dilation {dilation}")
    if any(2 * p > (k - 1) * d + 1 for p, k, d in zip(padding, kernel, dilation)):
        raise b.fail(f"{what}'s padding {padding} is more than half the kernel {kernel}; pad at most half of it")
    out = [_pooled_size(*args, ceil_mode) for args in zip(spatial, kernel, stride, padding, dilation)]
    if min(out) <= 0:
        raise b.fail(f"the {what} window {kernel} does not fit the image {list(spatial)} padded by {padding}")
    return kernel, stride, padding, dilation, out


def _windows(b: TensorBuilder, x: str, kernel, stride, padding, dilation, out, fill) -> str:
    """(..., OH, OW, KH * KW): each output position's window of ``x`` padded with ``fill``."""
    shape = b.shape(x)
    pads = []
    for size, k, s, p, d, o in reversed(list(zip(shape[-2:], kernel, stride, padding, dilation, out))):
        pads += [p, (o - 1) * s + (k - 1) * d + 1 - size - p]
    padded = pad(b, x, pads, fill)
    lead = len(shape) - 2
    windows = shape[:-2] + tuple(out) + (math.prod(kernel),)
    v = tensor_ir.output_vars(len(windows))
    row, column = v[-1] // kernel[1], v[-1] % kernel[1]
    index = [*v[:lead], v[lead] * stride[0] + row * dilation[0], v[lead + 1] * stride[1] + column * dilation[1]]
    return b.index_map(padded, index, windows, role="windows")


def _smallest(dtype: dtypes.DType) -> float | int:
    """What max pooling pads with: no element of the image is smaller."""
    return -math.inf if dtype.is_float else dtypes.integer_range(dtype)[0]


def decompose_max_pool2d_with_indices(b: TensorBuilder, node: Node) -> tuple[str, str]:
    x = tensor(b, node)
    dtype = b.dtype(x)
    if dtype == dtypes.bool_:
        raise b.fail(f"max_pool2d needs a number tensor, {x} is bool; cast it first")
    kernel, stride, padding, dilation, out = _window_settings(
        b, node, x, "max_pool2d", argument(node, 4, "dilation", 1), argument(node, 5, "ceil_mode", False))
    windows = _windows(b, x, kernel, stride, padding, dilation, out, _smallest(dtype))
    rank = len(b.shape(windows))
    values = b.max(windows, -1)
    height, width = b.shape(x)[-2:]
    row = Coord(rank - 3) * stride[0] - padding[0] + Coord(rank - 1) // kernel[1] * dilation[0]
    column = Coord(rank - 2) * stride[1] - padding[1] + Coord(rank - 1) % kernel[1] * dilation[1]
    inside = ex.op("and", ex.op("and", ex.op("ge", row, 0), ex.op("lt", row, height)),
                   ex.op("and", ex.op("ge", column, 0), ex.op("lt", column, width)))
    best = b.broadcast_to(b.unsqueeze(values, -1), b.shape(windows), role="best")
    found = ex.op("and", ex.op("eq", Arg(0, dtype), Arg(1, dtype)), inside)
    position = ex.op("where", found, row * width + column, ex.const(dtypes.integer_range(dtypes.int64)[1]))
    indices = b.reduction(b.elementwise(ex.cast(position, dtypes.int64), [windows, best], role="positions"),
                          [rank - 1], "min", role="indices")
    return values, indices


def _window_counts(kernel, stride, padding, spatial, axes: tuple[int, int], include_pad: bool) -> Expr:
    """How many elements the window of each output position holds, from its coordinates:
    PyTorch clips a window to the padded image, and without ``include_pad`` to the image."""
    count = None
    for axis, k, s, p, size in zip(axes, kernel, stride, padding, spatial):
        start = Coord(axis) * s - p
        end = ex.op("min", start + k, size + p)
        if not include_pad:
            start, end = ex.op("max", start, 0), ex.op("min", end, size)
        length = ex.op("sub", end, start)
        count = length if count is None else ex.op("mul", count, length)
    return count


def decompose_avg_pool2d(b: TensorBuilder, node: Node) -> str:
    x = tensor(b, node)
    dtype = b.dtype(x)
    if not dtype.is_float:
        raise b.fail(f"avg_pool2d needs a floating-point input, {x} is {dtype.name}; cast it first")
    kernel, stride, padding, dilation, out = _window_settings(
        b, node, x, "avg_pool2d", 1, argument(node, 4, "ceil_mode", False))
    acc = compute_dtype(dtype)
    windows = _windows(b, b.cast(x, acc, role="acc"), kernel, stride, padding, dilation, out, 0)
    total = b.sum(windows, -1)
    divisor = argument(node, 6, "divisor_override")
    if divisor is not None:
        if divisor == 0:
            raise b.fail("avg_pool2d's divisor_override is 0; give a positive divisor or leave it out")
        return b.cast(b.binary("div", total, float(divisor), role="average"), dtype)
    rank = len(b.shape(total))
    counts = _window_counts(kernel, stride, padding, b.shape(x)[-2:], (rank - 2, rank - 1),
                            argument(node, 5, "count_include_pad", True))
    average = ex.op("div", Arg(0, acc), ex.cast(counts, acc))
    return b.elementwise(ex.cast(average, dtype), [total], role="average")


def _adaptive_axis(size: int, out: int):
    """Where output ``o``'s window starts and ends (functions of ``o``), and the longest window."""

    def start(o):
        return (o * size) // out

    def end(o):
        return ((o + 1) * size + out - 1) // out

    return start, end, max(end(o) - start(o) for o in range(out))


def decompose_adaptive_avg_pool2d(b: TensorBuilder, node: Node) -> str:
    x = tensor(b, node)
    dtype = b.dtype(x)
    if not dtype.is_float:
        raise b.fail(f"adaptive_avg_pool2d needs a floating-point input, {x} is {dtype.name}; cast it first")
    spatial = _image(b, x, "adaptive_avg_pool2d")
    out = per_axis(b, argument(node, 1, "output_size"), 2, "output_size")
    if min(out) <= 0:
        raise b.fail(f"adaptive_avg_pool2d needs a positive output size, got {out}")
    shape = b.shape(x)
    lead = len(shape) - 2
    axes = [_adaptive_axis(size, o) for size, o in zip(spatial, out)]
    width = axes[1][2]
    windows_shape = shape[:-2] + tuple(out) + (axes[0][2] * width,)
    v = tensor_ir.output_vars(len(windows_shape))
    last = Coord(len(windows_shape) - 1)
    index, inside, count = list(v[:lead]), [], None
    for k, ((start, end, longest), size, o) in enumerate(zip(axes, spatial, out)):
        axis = lead + k
        offset, own_offset = (v[-1] // width, last // width) if k == 0 else (v[-1] % width, last % width)
        read = start(v[axis]) + offset
        length = end(Coord(axis)) - start(Coord(axis))
        if any(end(i) - start(i) != longest for i in range(o)):
            read = ex.op("min", read, size - 1)
            inside.append(ex.op("lt", own_offset, length))
        index.append(read)
        count = length if count is None else ex.op("mul", count, length)
    acc = compute_dtype(dtype)
    windows = b.index_map(b.cast(x, acc, role="acc"), index, windows_shape, role="windows")
    if inside:
        condition = inside[0] if len(inside) == 1 else ex.op("and", *inside)
        windows = b.elementwise(ex.op("where", condition, Arg(0, acc), ex.Const(0.0, acc)), [windows], role="masked")
    total = b.sum(windows, -1)
    average = ex.op("div", Arg(0, acc), ex.cast(count, acc))
    return b.elementwise(ex.cast(average, dtype), [total], role="average")


DECOMPOSITIONS = {
    "aten.max_pool2d_with_indices.default": decompose_max_pool2d_with_indices,
    "aten.avg_pool2d.default": decompose_avg_pool2d,
    "aten._adaptive_avg_pool2d.default": decompose_adaptive_avg_pool2d,
}

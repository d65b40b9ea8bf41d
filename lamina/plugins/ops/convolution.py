"""Convolutions as implicit matrix products, and batch norm in inference.

A convolution is a matmul of the weight, viewed as a (groups, C_out / groups, K) matrix
with K = C_in / groups * kernel size, and the input's patches, gathered by one IndexMap
into (N, groups, output rows, K, output columns): patch element ``(c, kh, kw)`` of
position ``(oh, ow)`` reads the zero-padded input at ``oh * stride + kh * dilation``. The
patches are never stored: the IndexMap and the padding fold into the contraction's
operand reads, so the contraction schedule takes a convolution as a matmul whose
epilogue (bias, batch norm, activation) runs on its results before they are stored.
The output rows are batch axes of the product, so that its columns are the output's
contiguous axis; with several groups the output channels interleave groups, which no
matmul tile covers, so the reordering to channels-first is left to a later kernel.

Batch norm in inference is one Elementwise of the input and the per-channel statistics,
``(x - mean) * rsqrt(var + eps) * weight + bias``, never a kernel of its own: after a
convolution it is that kernel's epilogue, or the prologue of the pooling or
convolution that reads it, as the fusion rules place pointwise work.
"""

from __future__ import annotations

import math

from lamina.core.ir import expr as ex, index, tensor_ir
from lamina.core.ir.sizes import Size
from lamina.core.ir.tensor_builder import TensorBuilder, compute_dtype
from lamina.core.ir.tensor_ir import Arg
from lamina.core.ir.torch_ir import Node
from lamina.plugins.ops.arguments import argument, tensor
from lamina.plugins.ops.padding import pad


def per_axis(b: TensorBuilder, values, rank: int, what: str) -> list[int]:
    """A convolution or pooling parameter as one value per spatial axis (one value serves them all)."""
    values = [values] if isinstance(values, int) else list(values)
    if len(values) == 1:
        values = values * rank
    if len(values) != rank:
        raise b.fail(f"{what} {values} needs one value per spatial axis, {rank} of them")
    return values


def _output_sizes(b: TensorBuilder, x: str, spatial, kernel, stride, padding, dilation) -> list[Size]:
    sizes = [(size + 2 * p - d * (k - 1) - 1) // s + 1
             for size, k, s, p, d in zip(spatial, kernel, stride, padding, dilation)]
    if any(isinstance(s, int) and s <= 0 for s in sizes):  # one known only at run time was traced to fit
        raise b.fail(f"the kernel {list(kernel)} (dilation {list(dilation)}) does not fit the input {x} of spatial "
                     f"size {list(spatial)} padded by {list(padding)}; the output would be {sizes}")
    return sizes


def _patches(b: TensorBuilder, padded: str, groups: int, kernel, out_sizes, stride, dilation) -> str:
    """(N, groups, *output rows, C_in / groups * kernel size, last output axis): the padded
    input under each kernel window, read at affine functions of plain output coordinates."""
    n, channels = b.shape(padded)[:2]
    per_group = channels // groups
    rank = len(out_sizes)
    shape = (n, groups, *out_sizes[:-1], per_group * math.prod(kernel), out_sizes[-1])
    d = tensor_ir.output_vars(len(shape))
    ranges = dict(zip((v.name for v in d), shape))
    channel, *offsets = index.delinearize(d[rank + 1], (per_group, *kernel), ranges)
    spots = (*d[2:rank + 1], d[rank + 2])
    reads = [o * st + k * dl for o, k, st, dl in zip(spots, offsets, stride, dilation)]
    return b.index_map(padded, [d[0], d[1] * per_group + channel, *reads], shape, role="patches")


def decompose_convolution(b: TensorBuilder, node: Node) -> str:
    x, weight = tensor(b, node, 0, "input"), tensor(b, node, 1, "weight")
    if argument(node, 6, "transposed", False):
        raise b.fail("transposed convolution (ConvTranspose) is not supported; "
                     "write it as a convolution of the zero-upsampled input or keep it out of the compiled program")
    sx, sw = b.shape(x), b.shape(weight)
    rank = len(sx) - 2
    if rank < 1 or len(sw) != len(sx):
        raise b.fail(f"convolution needs a (N, C, *spatial) input and a (C_out, C_in / groups, *kernel) weight of "
                     f"the same rank, got {list(sx)} and {list(sw)}")
    groups = argument(node, 8, "groups", 1)
    kernel = sw[2:]
    if sx[1] % groups or sw[0] % groups or sw[1] * groups != sx[1]:
        raise b.fail(f"a weight of shape {list(sw)} in {groups} group(s) does not fit an input of {sx[1]} channels; "
                     "C_in and C_out must divide by groups, and the weight hold C_in / groups channels")
    if b.dtype(x) != b.dtype(weight):
        raise b.fail(f"the input is {b.dtype(x).name} and the weight {b.dtype(weight).name}; "
                     "convolution needs them of one dtype, as PyTorch does")
    stride = per_axis(b, argument(node, 3, "stride", 1), rank, "stride")
    padding = per_axis(b, argument(node, 4, "padding", 0), rank, "padding")
    dilation = per_axis(b, argument(node, 5, "dilation", 1), rank, "dilation")
    out_sizes = _output_sizes(b, x, sx[2:], kernel, stride, padding, dilation)

    dtype = b.dtype(x)
    acc = compute_dtype(dtype)
    pads = [p for size in reversed(padding) for p in (size, size)]
    padded = pad(b, b.cast(x, acc, role="acc"), pads, 0)
    patches = _patches(b, padded, groups, kernel, out_sizes, stride, dilation)
    matrix = b.reshape(b.cast(weight, acc, role="weight_acc"), (groups, *(1,) * (rank - 1), sw[0] // groups, -1))
    product = b.matmul(matrix, patches)
    channels_first = b.permute(product, [0, 1, rank + 1, *range(2, rank + 1), rank + 2])
    result = b.reshape(channels_first, (sx[0], sw[0], *out_sizes))
    bias = argument(node, 2, "bias")
    if bias is not None:
        bias = b.cast(b.value(bias), acc, role="bias_acc")
        result = b.binary("add", result, b.reshape(bias, (sw[0],) + (1,) * rank), role="bias")
    return b.cast(result, dtype)


def decompose_batch_norm_inference(b: TensorBuilder, node: Node) -> tuple[str, str, str]:
    """``_native_batch_norm_legit_no_training``: the output, and the saved mean and inverse deviation in the
    shape and dtype that capture recorded for them: empty, of the input's dtype, on the CPU; one float32 per
    channel on CUDA (the running mean and ``rsqrt(running_var + eps)``, which nothing reads in inference)."""
    x = tensor(b, node, 0, "input")
    dtype = b.dtype(x)
    shape = b.shape(x)
    if not dtype.is_float:
        raise b.fail(f"batch norm needs a floating-point input, {x} is {dtype.name}")
    if len(shape) < 2:
        raise b.fail(f"batch norm needs an (N, C, ...) input, {x} has shape {list(shape)}")
    acc = compute_dtype(dtype)
    eps = float(argument(node, 6, "eps"))
    inputs = [x]
    value = ex.cast(Arg(0, dtype), acc)

    def channel(position: int, name: str) -> ex.Expr | None:
        stat = argument(node, position, name)
        if stat is None:
            return None
        stat = b.value(stat)
        if b.shape(stat) != (shape[1],):
            raise b.fail(f"batch norm's {name} has shape {list(b.shape(stat))}; it needs one value per channel, "
                         f"{shape[1]} of them")
        view = b.reshape(stat, (shape[1],) + (1,) * (len(shape) - 2))
        inputs.append(b.broadcast_to(view, shape, role=name))
        return ex.cast(Arg(len(inputs) - 1, b.dtype(stat)), acc)

    mean, var = channel(3, "running_mean"), channel(4, "running_var")
    if mean is None or var is None:
        raise b.fail("batch norm in inference needs the running mean and variance; "
                     "compile the model in eval mode with track_running_stats=True")
    value = ex.op("mul", ex.op("sub", value, mean), ex.op("rsqrt", ex.op("add", var, eps)))
    weight = channel(1, "weight")
    if weight is not None:
        value = ex.op("mul", value, weight)
    bias = channel(2, "bias")
    if bias is not None:
        value = ex.op("add", value, bias)
    out = b.elementwise(ex.cast(value, dtype), inputs, role="normalized")
    return (out, *_saved_statistics(b, node, argument(node, 3, "running_mean"), argument(node, 4, "running_var"),
                                    eps, dtype))


def _saved_statistics(b: TensorBuilder, node: Node, mean, var, eps: float, dtype) -> tuple[str, str]:
    recorded = (tuple(node.results) + (None,) * 3)[1:3]
    if not all(t is not None and t.shape == (b.shape(b.value(mean))[0],) for t in recorded):
        return b.full(0, (0,), dtype, role="saved_mean"), b.full(0, (0,), dtype, role="saved_invstd")
    invstd = b.unary("rsqrt", b.binary("add", b.value(var), eps, role="saved_var"), role="saved_invstd")
    return b.cast(b.value(mean), recorded[0].dtype, role="saved_mean"), b.cast(invstd, recorded[1].dtype)


DECOMPOSITIONS = {
    "aten.convolution.default": decompose_convolution,
    "aten._native_batch_norm_legit_no_training.default": decompose_batch_norm_inference,
}

"""Normalisations over the last axes of a row, in float32 for half inputs.

``rms_norm`` (kept whole): ``x * rsqrt(mean(x^2) + eps) * weight``. ``native_layer_norm``
(LayerNorm, what every ``nn.LayerNorm`` lowers to): ``(x - mean) * rsqrt(var + eps) * weight
+ bias`` with the population variance of the deviations, the mean and the reciprocal
standard deviation as its other two results. Like softmax, each is a row's reductions and
the elementwise work around them, which the fusion rules make one kernel. ``native_group_norm``
(GroupNorm) is the same over each group of a sample's channels and positions.
"""

from __future__ import annotations

from lamina.core.ir import dtypes
from lamina.core.ir.tensor_builder import TensorBuilder, compute_dtype
from lamina.core.ir.torch_ir import Node
from lamina.plugins.ops.arguments import argument, tensor

_MACHINE_EPSILON = {
    dtypes.float64: 2.0**-52,
    dtypes.float32: 2.0**-23,
    dtypes.float16: 2.0**-10,
    dtypes.bfloat16: 2.0**-7,
}
"""``torch.finfo(dtype).eps``: what ``rms_norm`` adds when no ``eps`` is given."""


def _normalized(b: TensorBuilder, node: Node, what: str) -> tuple[str, list[int]]:
    """The input of a norm and the axes it normalises: the last ones, as ``normalized_shape`` says."""
    x = tensor(b, node, 0, "input")
    if not b.dtype(x).is_float:
        raise b.fail(f"{what} needs a floating-point tensor, {x} is {b.dtype(x).name}")
    normalized = tuple(argument(node, 1, "normalized_shape"))
    rank = len(b.shape(x))
    if len(normalized) > rank or tuple(b.shape(x)[rank - len(normalized):]) != normalized:
        raise b.fail(f"{what} over {list(normalized)} does not fit {x} of shape {list(b.shape(x))}")
    return x, list(range(rank - len(normalized), rank))


def decompose_rms_norm(b: TensorBuilder, node: Node) -> str:
    x, axes = _normalized(b, node, "rms_norm")
    dtype = b.dtype(x)
    eps = argument(node, 3, "eps")
    eps = _MACHINE_EPSILON[dtype] if eps is None else eps
    wide = b.cast(x, compute_dtype(dtype), role="acc")
    mean_square = b.mean(b.binary("mul", wide, wide, role="square"), axes, keepdim=True)
    scale = b.unary("rsqrt", b.binary("add", mean_square, float(eps), role="eps"))
    result = b.binary("mul", wide, scale, role="normalized")
    weight = argument(node, 2, "weight")
    if weight is not None:
        result = b.binary("mul", result, b.value(weight), role="weighted")
    return b.cast(result, node.type.dtype if node.type else dtype)


def decompose_native_layer_norm(b: TensorBuilder, node: Node) -> tuple[str, str, str]:
    """``(output, mean, rstd)``; the statistics keep the normalised axes with size 1, in the
    dtype PyTorch gives them (float32 on CUDA, the input's own on the CPU)."""
    x, axes = _normalized(b, node, "layer_norm")
    dtype = b.dtype(x)
    wide = b.cast(x, compute_dtype(dtype), role="acc")
    mean = b.mean(wide, axes, keepdim=True)
    deviation = b.binary("sub", wide, mean, role="deviation")
    variance = b.mean(b.binary("mul", deviation, deviation, role="square"), axes, keepdim=True)
    rstd = b.unary("rsqrt", b.binary("add", variance, float(argument(node, 4, "eps")), role="eps"))
    result = b.binary("mul", deviation, rstd, role="normalized")
    for role, opname, position, name in (("weighted", "mul", 2, "weight"), ("shifted", "add", 3, "bias")):
        parameter = argument(node, position, name)
        if parameter is not None:
            result = b.binary(opname, result, b.value(parameter), role=role)
    statistics = [t.dtype if t is not None else b.dtype(mean) for t in (node.results + (None,) * 3)[1:3]]
    return b.cast(result, dtype), b.cast(mean, statistics[0]), b.cast(rstd, statistics[1])


def decompose_native_group_norm(b: TensorBuilder, node: Node) -> tuple[str, str, str]:
    """``(output, mean, rstd)`` of ``nn.GroupNorm``: each sample's channels in ``group`` groups, each group
    normalised over its channels and positions, then a weight and a bias per channel; the statistics are
    (N, group)."""
    x = tensor(b, node, 0, "input")
    shape = b.shape(x)
    groups, eps = argument(node, 6, "group"), float(argument(node, 7, "eps"))
    if len(shape) < 2 or shape[1] % groups:
        raise b.fail(f"group_norm in {groups} groups does not fit {x} of shape {list(shape)}: the channels "
                     "(axis 1) must divide by the groups")
    dtype = b.dtype(x)
    wide = b.reshape(b.cast(x, compute_dtype(dtype), role="acc"), (shape[0], groups, -1))
    mean = b.mean(wide, [2], keepdim=True)
    deviation = b.binary("sub", wide, mean, role="deviation")
    variance = b.mean(b.binary("mul", deviation, deviation, role="square"), [2], keepdim=True)
    rstd = b.unary("rsqrt", b.binary("add", variance, eps, role="eps"))
    result = b.reshape(b.binary("mul", deviation, rstd, role="normalized"), shape)
    per_channel = (shape[1],) + (1,) * (len(shape) - 2)
    for role, opname, position, name in (("weighted", "mul", 1, "weight"), ("shifted", "add", 2, "bias")):
        parameter = argument(node, position, name)
        if parameter is not None:
            result = b.binary(opname, result, b.reshape(b.value(parameter), per_channel), role=role)
    statistics = [t.dtype if t is not None else b.dtype(mean) for t in (node.results + (None,) * 3)[1:3]]
    return (b.cast(result, dtype), b.cast(b.reshape(mean, (shape[0], groups)), statistics[0]),
            b.cast(b.reshape(rstd, (shape[0], groups)), statistics[1]))


DECOMPOSITIONS = {
    "aten.rms_norm.default": decompose_rms_norm,
    "aten.native_layer_norm.default": decompose_native_layer_norm,
    "aten.native_group_norm.default": decompose_native_group_norm,
}

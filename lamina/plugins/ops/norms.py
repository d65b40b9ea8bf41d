"""``rms_norm`` kept whole: ``x * rsqrt(mean(x^2) + eps) * weight``, in float32 for half inputs."""

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


def decompose_rms_norm(b: TensorBuilder, node: Node) -> str:
    x = tensor(b, node, 0, "input")
    dtype = b.dtype(x)
    if not dtype.is_float:
        raise b.fail(f"rms_norm needs a floating-point tensor, {x} is {dtype.name}")
    normalized = argument(node, 1, "normalized_shape")
    rank = len(b.shape(x))
    axes = list(range(rank - len(normalized), rank))
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


DECOMPOSITIONS = {
    "aten.rms_norm.default": decompose_rms_norm,
}

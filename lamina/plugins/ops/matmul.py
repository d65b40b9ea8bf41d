"""Matrix products: broadcast both sides to (..., M, K, N), multiply, sum over K.

``linear`` stays whole through capture (see ``DEFAULT_KEEP``), so that its weight's
transpose folds into the IndexMap that reads it instead of becoming a separate op.
"""

from __future__ import annotations

from lamina.core.ir.tensor_builder import TensorBuilder
from lamina.core.ir.torch_ir import Node
from lamina.plugins.ops.arguments import argument, tensor


def decompose_mm(b: TensorBuilder, node: Node) -> str:
    return b.matmul(tensor(b, node), tensor(b, node, 1, "mat2"))


def _plus_bias(b: TensorBuilder, product: str, bias: str, dtype) -> str:
    """``product`` (float32 sums) plus ``bias``, rounded to ``dtype`` once: a half-precision bias is added
    before the sums are rounded, as cuBLAS adds it, not after."""
    bias = b.broadcast_to(b.cast(bias, b.dtype(product), role="bias_acc"), b.shape(product), role="bias")
    return b.cast(b.binary("add", product, bias), dtype)


def decompose_addmm(b: TensorBuilder, node: Node) -> str:
    """``beta * input + alpha * (mat1 @ mat2)``; with beta 0 the input is not read, as in PyTorch."""
    mat1, mat2 = tensor(b, node, 1, "mat1"), tensor(b, node, 2, "mat2")
    dtype = b.result_type(mat1, mat2)
    product = b.matmul(mat1, mat2, rounded=False)
    beta, alpha = node.kwarg("beta", 1), node.kwarg("alpha", 1)
    if alpha != 1:
        product = b.binary("mul", product, alpha, role="alpha")
    if beta == 0:
        return b.cast(product, dtype)
    bias = b.value(node.args[0])
    if beta != 1:
        bias = b.binary("mul", bias, beta, role="beta")
    return _plus_bias(b, product, bias, b.result_type(mat1, mat2, bias))


def decompose_linear(b: TensorBuilder, node: Node) -> str:
    """``input @ weight.T + bias``."""
    x, weight = tensor(b, node, 0, "input"), tensor(b, node, 1, "weight")
    if len(b.shape(weight)) == 2:
        weight = b.transpose(weight, 0, 1)
    bias = argument(node, 2, "bias")
    if bias is None:
        return b.matmul(x, weight)
    bias = b.value(bias)
    return _plus_bias(b, b.matmul(x, weight, rounded=False), bias, b.result_type(x, weight, bias))


DECOMPOSITIONS = {
    "aten.mm.default": decompose_mm,
    "aten.bmm.default": decompose_mm,
    "aten.matmul.default": decompose_mm,
    "aten.addmm.default": decompose_addmm,
    "aten.linear.default": decompose_linear,
}

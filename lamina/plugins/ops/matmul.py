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


def decompose_addmm(b: TensorBuilder, node: Node) -> str:
    """``beta * input + alpha * (mat1 @ mat2)``; with beta 0 the input is not read, as in PyTorch."""
    product = b.matmul(tensor(b, node, 1, "mat1"), tensor(b, node, 2, "mat2"))
    beta, alpha = node.kwarg("beta", 1), node.kwarg("alpha", 1)
    if alpha != 1:
        product = b.binary("mul", product, alpha, role="alpha")
    if beta == 0:
        return product
    bias = b.broadcast_to(b.value(node.args[0]), b.shape(product), role="bias")
    if beta != 1:
        bias = b.binary("mul", bias, beta, role="beta")
    return b.binary("add", product, bias)


def decompose_linear(b: TensorBuilder, node: Node) -> str:
    """``input @ weight.T + bias``."""
    weight = tensor(b, node, 1, "weight")
    if len(b.shape(weight)) == 2:
        weight = b.transpose(weight, 0, 1)
    product = b.matmul(tensor(b, node, 0, "input"), weight)
    bias = argument(node, 2, "bias")
    if bias is None:
        return product
    return b.binary("add", product, b.broadcast_to(b.value(bias), b.shape(product), role="bias"))


DECOMPOSITIONS = {
    "aten.mm.default": decompose_mm,
    "aten.bmm.default": decompose_mm,
    "aten.matmul.default": decompose_mm,
    "aten.addmm.default": decompose_addmm,
    "aten.linear.default": decompose_linear,
}

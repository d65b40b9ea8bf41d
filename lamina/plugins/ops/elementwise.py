"""Arithmetic, comparisons, math functions, selection and clamping: one Elementwise each.

Python numbers among the operands become constants of the function; tensors are
broadcast to a common shape first, and the result type follows PyTorch's promotion.
"""

from __future__ import annotations

from lamina.core.ir.tensor_builder import TensorBuilder
from lamina.core.ir.torch_ir import Node
from lamina.plugins.ops.arguments import argument, operand, tensor


def _binary(opname: str):
    def decompose(b: TensorBuilder, node: Node) -> str:
        return b.binary(opname, operand(b, node.args[0]), operand(b, node.args[1]))

    return decompose


def _unary(opname: str):
    def decompose(b: TensorBuilder, node: Node) -> str:
        return b.unary(opname, tensor(b, node))

    return decompose


def _with_alpha(opname: str):
    """``add`` and ``sub``: ``self op alpha * other``."""

    def decompose(b: TensorBuilder, node: Node) -> str:
        other = operand(b, node.args[1])
        alpha = argument(node, 2, "alpha", 1)
        if alpha != 1:
            other = b.binary("mul", other, alpha) if isinstance(other, str) else other * alpha
        return b.binary(opname, operand(b, node.args[0]), other)

    return decompose


def decompose_relu(b: TensorBuilder, node: Node) -> str:
    return b.binary("max", tensor(b, node), 0)


def decompose_where(b: TensorBuilder, node: Node) -> str:
    cond, a, other = (operand(b, v) for v in node.args[:3])
    return b.where(cond, a, other)


def decompose_hardtanh(b: TensorBuilder, node: Node) -> str:
    """``clamp(x, min_val, max_val)``, -1 and 1 unless given (``nn.ReLU6`` is 0 and 6)."""
    x = tensor(b, node)
    low, high = argument(node, 1, "min_val", -1.0), argument(node, 2, "max_val", 1.0)
    return b.binary("min", b.binary("max", x, low, role="low"), high, role="high")


def decompose_clamp(b: TensorBuilder, node: Node) -> str:
    """``min(max(x, low), high)``, either bound optional."""
    result = tensor(b, node)
    low, high = operand(b, argument(node, 1, "min")), operand(b, argument(node, 2, "max"))
    if low is not None:
        result = b.binary("max", result, low, role="low")
    if high is not None:
        result = b.binary("min", result, high, role="high")
    return result


_UNARY = ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sigmoid", "tanh", "sin", "cos", "erf")
_COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")

DECOMPOSITIONS = {
    "aten.add.Tensor": _with_alpha("add"),
    "aten.add.Scalar": _with_alpha("add"),
    "aten.sub.Tensor": _with_alpha("sub"),
    "aten.sub.Scalar": _with_alpha("sub"),
    "aten.mul.Tensor": _binary("mul"),
    "aten.mul.Scalar": _binary("mul"),
    "aten.div.Tensor": _binary("div"),
    "aten.div.Scalar": _binary("div"),
    "aten.maximum.default": _binary("max"),
    "aten.minimum.default": _binary("min"),
    "aten.pow.Tensor_Scalar": _binary("pow"),
    "aten.pow.Tensor_Tensor": _binary("pow"),
    "aten.pow.Scalar": _binary("pow"),
    "aten.relu.default": decompose_relu,
    "aten.where.self": decompose_where,
    "aten.clamp.default": decompose_clamp,
    "aten.hardtanh.default": decompose_hardtanh,
    "aten.clamp.Tensor": decompose_clamp,
    **{f"aten.{name}.default": _unary(name) for name in _UNARY},
    **{f"aten.{name}.{form}": _binary(name) for name in _COMPARE for form in ("Tensor", "Scalar")},
}

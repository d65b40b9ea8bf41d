"""Each op as one Elementwise: the formula of ``formulas.py`` over its (broadcast) inputs.

Half-precision inputs compute in float32 and round once at the end, as PyTorch does;
integer inputs compute in float32, the type PyTorch gives these ops' results.
"""

from __future__ import annotations

from typing import Callable

from lamina.core.ir import dtypes, expr as ex
from lamina.core.ir.expr import Expr
from lamina.core.ir.tensor_builder import TensorBuilder, compute_dtype
from lamina.core.ir.tensor_ir import Arg
from lamina.core.ir.torch_ir import Node, Ref

from lamina_extra_ops import formulas


def _tensor(b: TensorBuilder, node: Node, position: int, name: str) -> str:
    value = node.args[position] if len(node.args) > position else node.kwarg(name)
    if not isinstance(value, Ref):
        raise b.fail(f"{node.target} takes a tensor as {name}, got {value!r}")
    return b.value(value)


def _formula(b: TensorBuilder, inputs: list[str], formula: Callable[..., Expr]) -> str:
    """``formula`` over ``inputs`` broadcast to one shape, in the result type PyTorch gives."""
    result = b.result_type(*inputs)
    if not result.is_float:
        result = dtypes.float32
    compute = compute_dtype(result)
    inputs = b.broadcast(*inputs)
    args = [ex.cast(Arg(k, b.dtype(name)), compute) for k, name in enumerate(inputs)]
    return b.elementwise(ex.cast(formula(*args), result), inputs)


def _unary(formula: Callable[[Expr], Expr]):
    def decompose(b: TensorBuilder, node: Node) -> str:
        return _formula(b, [_tensor(b, node, 0, "self")], formula)

    decompose.__name__ = f"decompose_{formula.__name__}"
    return decompose


def decompose_logaddexp(b: TensorBuilder, node: Node) -> str:
    return _formula(b, [_tensor(b, node, 0, "self"), _tensor(b, node, 1, "other")], formulas.logaddexp)


def decompose_softplus(b: TensorBuilder, node: Node) -> str:
    """``softplus(self, beta=1, threshold=20)``: ``softplus(beta * x) / beta``, and ``x`` where ``beta * x > threshold``."""
    beta = node.args[1] if len(node.args) > 1 else node.kwarg("beta", 1)
    threshold = node.args[2] if len(node.args) > 2 else node.kwarg("threshold", 20)

    def formula(x: Expr) -> Expr:
        scaled = ex.op("mul", x, float(beta))
        smooth = ex.op("div", formulas.softplus(scaled), float(beta))
        return ex.op("where", ex.op("gt", scaled, float(threshold)), x, smooth)

    return _formula(b, [_tensor(b, node, 0, "self")], formula)


DECOMPOSITIONS = {
    "aten.logaddexp.default": decompose_logaddexp,
    "aten.log1p.default": _unary(formulas.log1p),
    "aten.softplus.default": decompose_softplus,
    "aten.mish.default": _unary(formulas.mish),
    "aten.hardswish.default": _unary(formulas.hardswish),
}
"""ATen op name (as Torch IR prints it) -> decomposition."""

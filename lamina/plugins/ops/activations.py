"""Activations and normalisations that ``DEFAULT_KEEP`` holds whole through capture.

Pointwise activations are one Elementwise with the whole formula; softmax is a max,
an exponential, a sum and a division. Half-precision inputs compute in float32.
"""

from __future__ import annotations

import math

import attrs

from lamina.core.ir import dtypes, expr as ex
from lamina.core.ir.tensor_builder import TensorBuilder, compute_dtype
from lamina.core.ir.tensor_ir import Arg
from lamina.core.ir.torch_ir import Node
from lamina.plugins.ops.arguments import argument, tensor

def _pointwise(b: TensorBuilder, x: str, formula) -> str:
    """``formula(v)`` over one input, computed in float32 for half precision and cast back."""
    dtype = b.dtype(x)
    return b.elementwise(ex.cast(formula(ex.cast(Arg(0, dtype), compute_dtype(dtype))), dtype), [x])


def decompose_silu(b: TensorBuilder, node: Node) -> str:
    return _pointwise(b, tensor(b, node), lambda v: ex.op("mul", v, ex.op("sigmoid", v)))


def _gelu_erf(v):
    cdf = ex.op("add", ex.op("erf", ex.op("mul", v, math.sqrt(0.5))), 1.0)
    return ex.op("mul", ex.op("mul", v, 0.5), cdf)


def _gelu_tanh(v):
    cube = ex.op("mul", ex.op("mul", v, v), v)
    inner = ex.op("mul", ex.op("add", v, ex.op("mul", cube, 0.044715)), math.sqrt(2 / math.pi))
    return ex.op("mul", ex.op("mul", v, 0.5), ex.op("add", ex.op("tanh", inner), 1.0))


def decompose_gelu(b: TensorBuilder, node: Node) -> str:
    formula = _gelu_tanh if node.kwarg("approximate", "none") == "tanh" else _gelu_erf
    return _pointwise(b, tensor(b, node), formula)


@attrs.frozen
class Softmax:
    """The pieces of a numerically stable softmax along ``axis``, each kept along it with size 1."""

    builder: TensorBuilder = attrs.field(eq=False, repr=False)
    axis: int
    maximum: str
    shifted: str
    exponentials: str
    total: str

    def probabilities(self) -> str:
        return self.builder.binary("div", self.exponentials, self.total, role="softmax")

    def logarithm(self) -> str:
        return self.builder.binary("sub", self.shifted, self.builder.unary("log", self.total), role="log_softmax")

    def log_sum_exp(self) -> str:
        """``log(sum(exp(x)))`` along the axis, which goes away."""
        b = self.builder
        return b.squeeze(b.binary("add", self.maximum, b.unary("log", self.total), role="log_sum_exp"), self.axis)


def softmax_of(b: TensorBuilder, x: str, dim: int) -> Softmax:
    """``exp(x - max) / sum(exp(x - max))`` along ``dim``, in pieces, in ``x``'s compute type."""
    x = b.cast(x, compute_dtype(b.dtype(x)), role="acc")
    axis = b.axis(dim, len(b.shape(x)))
    maximum = b.max(x, axis, keepdim=True)
    shifted = b.binary("sub", x, maximum, role="shifted")
    exps = b.unary("exp", shifted)
    return Softmax(b, axis, maximum, shifted, exps, b.sum(exps, axis, keepdim=True))


def stable_softmax(b: TensorBuilder, x: str, dim: int, dtype: dtypes.DType | None, log: bool) -> str:
    """``exp(x - max) / sum(exp(x - max))`` along ``dim``, or its logarithm, as ``dtype``."""
    out = dtype or b.dtype(x)
    softmax = softmax_of(b, b.cast(x, compute_dtype(out), role="acc"), dim)
    return b.cast(softmax.logarithm() if log else softmax.probabilities(), out)


def decompose_softmax(b: TensorBuilder, node: Node) -> str:
    """``softmax.int(self, dim, dtype=None)``."""
    return stable_softmax(b, tensor(b, node), argument(node, 1, "dim"), argument(node, 2, "dtype"), log=False)


def decompose_log_softmax(b: TensorBuilder, node: Node) -> str:
    return stable_softmax(b, tensor(b, node), argument(node, 1, "dim"), argument(node, 2, "dtype"), log=True)


def _float_result(node: Node) -> dtypes.DType | None:
    """``_softmax(self, dim, half_to_float)``: float32 out of half inputs when asked."""
    return dtypes.float32 if argument(node, 2, "half_to_float", False) else None


def decompose_aten_softmax(b: TensorBuilder, node: Node) -> str:
    return stable_softmax(b, tensor(b, node), argument(node, 1, "dim"), _float_result(node), log=False)


def decompose_aten_log_softmax(b: TensorBuilder, node: Node) -> str:
    return stable_softmax(b, tensor(b, node), argument(node, 1, "dim"), _float_result(node), log=True)


DECOMPOSITIONS = {
    "aten.silu.default": decompose_silu,
    "aten.gelu.default": decompose_gelu,
    "aten.softmax.int": decompose_softmax,
    "aten._softmax.default": decompose_aten_softmax,
    "aten.log_softmax.int": decompose_log_softmax,
    "aten._log_softmax.default": decompose_aten_log_softmax,
}

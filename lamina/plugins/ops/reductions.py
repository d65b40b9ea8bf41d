"""Reductions: one Reduction each, with the casts PyTorch applies around it.

ATen reads an empty ``dim`` list as every axis. Integer sums and products come out
as int64; half-precision ones add up in float32, as PyTorch does.
"""

from __future__ import annotations

import math

from lamina.core.ir.tensor_builder import TensorBuilder
from lamina.core.ir.torch_ir import Node
from lamina.plugins.ops.arguments import argument, tensor


def decompose_sum(b: TensorBuilder, node: Node) -> str:
    return b.sum(tensor(b, node), argument(node, 1, "dim"), argument(node, 2, "keepdim", False), node.kwarg("dtype"))


def decompose_sum_all(b: TensorBuilder, node: Node) -> str:
    return b.sum(tensor(b, node), None, False, node.kwarg("dtype"))


def decompose_mean(b: TensorBuilder, node: Node) -> str:
    return b.mean(tensor(b, node), argument(node, 1, "dim"), argument(node, 2, "keepdim", False), node.kwarg("dtype"))


def decompose_mean_all(b: TensorBuilder, node: Node) -> str:
    return b.mean(tensor(b, node), None, False, node.kwarg("dtype"))


def decompose_prod(b: TensorBuilder, node: Node) -> str:
    return b.prod(tensor(b, node), argument(node, 1, "dim"), argument(node, 2, "keepdim", False), node.kwarg("dtype"))


def decompose_prod_all(b: TensorBuilder, node: Node) -> str:
    return b.prod(tensor(b, node), None, False, node.kwarg("dtype"))


def decompose_amax(b: TensorBuilder, node: Node) -> str:
    return b.max(tensor(b, node), argument(node, 1, "dim"), argument(node, 2, "keepdim", False))


def decompose_amin(b: TensorBuilder, node: Node) -> str:
    return b.min(tensor(b, node), argument(node, 1, "dim"), argument(node, 2, "keepdim", False))


def decompose_max_all(b: TensorBuilder, node: Node) -> str:
    return b.max(tensor(b, node))


def decompose_min_all(b: TensorBuilder, node: Node) -> str:
    return b.min(tensor(b, node))


def _variance(b: TensorBuilder, node: Node) -> tuple[str, str]:
    """``(var, mean)`` over ``dim``: the mean of squared deviations, divided by ``N - correction``."""
    x = tensor(b, node)
    dims = argument(node, 1, "dim")
    keepdim = node.kwarg("keepdim", False)
    correction = node.kwarg("correction")
    correction = 1 if correction is None else correction
    reduced = [b.axis(d, len(b.shape(x))) for d in dims] if dims else list(range(len(b.shape(x))))
    count = math.prod(b.shape(x)[a] for a in reduced)
    mean = b.mean(x, reduced, keepdim=True)
    deviation = b.binary("sub", x, mean, role="deviation")
    squares = b.binary("mul", deviation, deviation, role="square")
    total = b.sum(squares, reduced, keepdim)
    var = b.binary("div", total, float(max(0, count - correction)), role="var")
    if not keepdim:
        mean = b.squeeze(mean, reduced)
    return var, mean


def decompose_var(b: TensorBuilder, node: Node) -> str:
    return _variance(b, node)[0]


def decompose_var_mean(b: TensorBuilder, node: Node) -> tuple[str, str]:
    return _variance(b, node)


DECOMPOSITIONS = {
    "aten.sum.dim_IntList": decompose_sum,
    "aten.sum.default": decompose_sum_all,
    "aten.mean.dim": decompose_mean,
    "aten.mean.default": decompose_mean_all,
    "aten.prod.dim_int": decompose_prod,
    "aten.prod.default": decompose_prod_all,
    "aten.amax.default": decompose_amax,
    "aten.amin.default": decompose_amin,
    "aten.max.default": decompose_max_all,
    "aten.min.default": decompose_min_all,
    "aten.var.correction": decompose_var,
    "aten.var_mean.correction": decompose_var_mean,
}

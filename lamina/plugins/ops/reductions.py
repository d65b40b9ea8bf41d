"""Reductions: one Reduction each, with the casts PyTorch applies around it.

ATen reads an empty ``dim`` list as every axis. Integer sums and products come out
as int64; half-precision ones add up in float32, as PyTorch does.

``max.dim`` / ``min.dim`` and ``argmax`` / ``argmin`` find the extreme value with one
Reduction, then its index with a second: a ``min`` over the positions where the
input equals it, so that ties give the first index as in eager. A NaN counts as
found wherever it lies: the value reduction propagates NaN, nothing then equals it,
and the index is the first NaN's, as eager's.
"""

from __future__ import annotations

import math

from lamina.core.ir import dtypes, expr as ex
from lamina.core.ir.tensor_builder import TensorBuilder
from lamina.core.ir.tensor_ir import Arg, Coord
from lamina.core.ir.type_promotion import compute_dtype
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


def decompose_vector_norm(b: TensorBuilder, node: Node) -> str:
    """``torch.linalg.vector_norm``: ``sum(|x| ** ord) ** (1 / ord)`` over ``dim``, accumulated in float32
    for half inputs; the largest or smallest ``|x|`` for an infinite ``ord``, the count of non-zeros for 0."""
    x = tensor(b, node)
    order = float(argument(node, 1, "ord", 2))
    dims, keepdim = argument(node, 2, "dim"), argument(node, 3, "keepdim", False)
    result_dtype = node.type.dtype if node.type is not None else b.dtype(x)
    wide = b.cast(x, compute_dtype(result_dtype), role="acc")
    size = b.unary("abs", wide, role="size")
    if math.isinf(order):
        total = b.reduce(size, "max" if order > 0 else "min", dims, keepdim)
    elif order == 0:
        total = b.sum(b.cast(b.binary("ne", wide, 0.0, role="nonzero"), b.dtype(wide)), dims, keepdim)
    elif order == 1:
        total = b.sum(size, dims, keepdim)
    elif order == 2:
        total = b.unary("sqrt", b.sum(b.binary("mul", wide, wide, role="square"), dims, keepdim))
    else:
        powers = b.sum(b.binary("pow", size, order, role="power"), dims, keepdim)
        total = b.binary("pow", powers, 1.0 / order, role="root")
    return b.cast(total, result_dtype)


def decompose_max_all(b: TensorBuilder, node: Node) -> str:
    return b.max(tensor(b, node))


def decompose_min_all(b: TensorBuilder, node: Node) -> str:
    return b.min(tensor(b, node))


def _extreme_with_index(b: TensorBuilder, x: str, op: str, dim: int | None, keepdim: bool) -> tuple[str, str]:
    """``(values, indices)`` of the ``op`` (max or min) of ``x`` along ``dim``, or over the
    flattened tensor when ``dim`` is None; indices are int64 positions along ``dim``
    (row-major positions in ``x`` when flattened), the first one on ties."""
    shape = b.shape(x)
    if dim is not None and not shape:
        b.axis(dim, 0)
        return x, b.full(0, (), dtypes.int64, role="index")
    axes = list(range(len(shape))) if dim is None else [b.axis(dim, len(shape))]
    dtype = b.dtype(x)
    compared = b.cast(x, dtypes.int32, role="as_number") if dtype == dtypes.bool_ else x
    compute = b.dtype(compared)
    best = b.reduce(compared, op, axes, keepdim=True)
    position, stride = ex.const(0), 1
    for axis in reversed(axes):
        position, stride = Coord(axis) * stride + position, stride * shape[axis]
    found = ex.op("eq", Arg(0, compute), Arg(1, compute))
    if compute.is_float:
        found = ex.op("or", found, ex.op("ne", Arg(0, compute), Arg(0, compute)))
    last = ex.const(dtypes.integer_range(dtypes.int64)[1])
    candidates = b.elementwise(ex.cast(ex.op("where", found, position, last), dtypes.int64),
                               [compared, b.broadcast_to(best, shape, role="best")], role="positions")
    indices = b.reduce(candidates, "min", axes, keepdim, role="indices")
    return b.cast(best if keepdim else b.squeeze(best, axes), dtype), indices


def decompose_max_dim(b: TensorBuilder, node: Node) -> tuple[str, str]:
    return _extreme_with_index(b, tensor(b, node), "max", argument(node, 1, "dim"),
                               argument(node, 2, "keepdim", False))


def decompose_min_dim(b: TensorBuilder, node: Node) -> tuple[str, str]:
    return _extreme_with_index(b, tensor(b, node), "min", argument(node, 1, "dim"),
                               argument(node, 2, "keepdim", False))


def _argument_index(b: TensorBuilder, node: Node, op: str) -> str:
    x = tensor(b, node)
    if b.dtype(x) == dtypes.bool_:
        raise b.fail(f"arg{op} needs a number tensor, {x} is bool; cast it first")
    return _extreme_with_index(b, x, op, argument(node, 1, "dim"), argument(node, 2, "keepdim", False))[1]


def decompose_argmax(b: TensorBuilder, node: Node) -> str:
    return _argument_index(b, node, "max")


def decompose_argmin(b: TensorBuilder, node: Node) -> str:
    return _argument_index(b, node, "min")


def _variance(b: TensorBuilder, node: Node) -> tuple[str, str]:
    """``(var, mean)`` over ``dim``: the mean of squared deviations, divided by ``N - correction``.

    Half floats are widened to float32 first and both results rounded once at the end, as
    eager PyTorch does: rounding the mean, the deviations and their squares each to bf16
    loses a unit in the last place of the variance."""
    x = tensor(b, node)
    dtype = b.dtype(x)
    x = b.cast(x, compute_dtype(dtype), role="acc")
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
    return b.cast(var, dtype), b.cast(mean, dtype)


def decompose_var(b: TensorBuilder, node: Node) -> str:
    return _variance(b, node)[0]


def decompose_var_mean(b: TensorBuilder, node: Node) -> tuple[str, str]:
    return _variance(b, node)


DECOMPOSITIONS = {
    "aten.sum.dim_IntList": decompose_sum,
    "aten.sum.default": decompose_sum_all,
    "aten.linalg_vector_norm.default": decompose_vector_norm,
    "aten.mean.dim": decompose_mean,
    "aten.mean.default": decompose_mean_all,
    "aten.prod.dim_int": decompose_prod,
    "aten.prod.default": decompose_prod_all,
    "aten.amax.default": decompose_amax,
    "aten.amin.default": decompose_amin,
    "aten.max.default": decompose_max_all,
    "aten.min.default": decompose_min_all,
    "aten.max.dim": decompose_max_dim,
    "aten.min.dim": decompose_min_dim,
    "aten.argmax.default": decompose_argmax,
    "aten.argmin.default": decompose_argmin,
    "aten.var.correction": decompose_var,
    "aten.var_mean.correction": decompose_var_mean,
}

"""Split-K slices of whole k-tiles that need not be equal, written in Loop IR and read back.

Split-K's slices must cover the reduction in whole k-tiles. Equal slices exist only for
the slice counts that divide the k-tiles: TinyLlama's K = 2048 is 128 k-tiles of 16,
which splits 2, 4, 8 ... ways but not 3, and 88 blocks of 128 x 128 times 3 slices is what
fills the H200's 264 places at two blocks per SM. So every slice but the last is
``length`` long and the last one is shorter. In Loop IR the reduction variable ``r`` of
slice ``s`` runs to ``length`` and the sum is guarded, its reads clamped into the tensor::

    where(s * length + r < K, x[i, min(s * length + r, K - 1)] * w[j, min(s * length + r, K - 1)], 0)

which is exact and reads nothing outside the tensors. The contraction recogniser reads
the guard back as a ``SliceBound``, and the schedule then runs each block's reduction
only to the end of its own slice: no guard and no clamp is left in the inner loop.
"""

from __future__ import annotations

import math

import attrs

from lamina.core.ir import expr as ex, index
from lamina.core.ir.expr import Expr

SLICE_MULTIPLE = 16
"""Every slice is a whole number of 16-deep k-tiles, the contraction's usual step."""


@attrs.frozen
class SliceBound:
    """The reduction runs while ``start + r < end``; ``start`` depends only on block-uniform
    batch variables (the slice), so each block's reduction simply ends sooner."""

    start: Expr
    end: int

    @property
    def multiple(self) -> int:
        """What every slice's length is a multiple of: its k-tiles must divide it."""
        form = index.affine(self.start)
        return math.gcd(self.end, form.constant, *form.terms.values())

    def text(self, reduce_var: str) -> str:
        return f"{index.simplify(self.start) + ex.Var(reduce_var)} < {self.end}"


def slice_length(extent: int, splits: int, multiple: int = SLICE_MULTIPLE) -> int | None:
    """The length of every slice but the last when ``splits`` slices of whole ``multiple``s,
    as equal as they can be, cover ``extent``; None where they cannot (a slice would be empty)."""
    if splits < 1 or extent % multiple:
        return None
    length = math.ceil(extent // multiple / splits) * multiple
    return length if (splits - 1) * length < extent else None


def guarded(value: Expr, reduce_var: str, start: Expr, end: int) -> Expr:
    """``value``, which reads the reduction at ``start + r``, as the guarded sum term of a
    slice that may run past ``end``."""
    at = start + ex.Var(reduce_var)
    clamped = ex.op("min", at, ex.const(end - 1))
    inside = ex.substitute(value, {reduce_var: clamped})
    return ex.op("where", ex.op("lt", at, ex.const(end)), inside, ex.cast(ex.const(0), value.dtype))


def read_guard(value: Expr, reduce_var: str) -> tuple[Expr, SliceBound | None]:
    """``value`` without the guard and clamps that ``guarded`` wrote, and the bound they stood
    for; ``value`` itself and None where it has no such guard, or one that is the same in
    every block (``where(r < 5, ...)``, which the sum keeps)."""
    if not (isinstance(value, ex.Op) and value.op == "where"):
        return value, None
    condition, inside, otherwise = value.args
    if not (isinstance(otherwise, ex.Const) and otherwise.value == 0
            and isinstance(condition, ex.Op) and condition.op == "lt" and isinstance(condition.args[1], ex.Const)):
        return value, None
    at, bound = condition.args
    if at.dtype.is_float or bound.dtype.is_float or index.coefficient(at, reduce_var) != 1:
        return value, None
    end = int(bound.value)
    start = index.simplify(ex.substitute(at, {reduce_var: ex.const(0)}))
    if not index.affine(start).terms:
        return value, None
    clamped = ex.op("min", at, ex.const(end - 1))
    unclamped = ex.transform(inside, lambda node: at if node == clamped else None)
    return unclamped, SliceBound(start, end)

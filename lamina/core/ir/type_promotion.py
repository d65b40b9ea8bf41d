"""PyTorch's rules for the types and shapes of results, as Tensor IR builds them.

Tensors of rank > 0 lead the promotion, then 0-d tensors, then Python numbers; a
lower tier raises the type only to a higher category (bool < integer < float).
Half precision computes in float32, as PyTorch's kernels do.
"""

from __future__ import annotations

from typing import Iterable

from lamina.core.ir import dtypes
from lamina.core.ir.dtypes import DType
from lamina.core.ir.expr import Expr

Scalar = int | float | bool


def category(dtype: DType) -> int:
    """0 for bool, 1 for integers, 2 for floats."""
    return 2 if dtype.is_float else (0 if dtype == dtypes.bool_ else 1)


def number_dtype(value: Scalar) -> DType:
    """The dtype PyTorch gives a Python number: bool, int64 (a size known only at run time, ``s0``,
    too) or float32."""
    if isinstance(value, bool):
        return dtypes.bool_
    return dtypes.int64 if isinstance(value, (int, Expr)) else dtypes.float32


def compute_dtype(dtype: DType) -> DType:
    """The type arithmetic on ``dtype`` runs in: half precision computes in float32, as PyTorch does."""
    return dtypes.float32 if dtype in (dtypes.float16, dtypes.bfloat16) else dtype


def promote_all(found: Iterable[DType]) -> DType | None:
    result = None
    for d in found:
        result = d if result is None else dtypes.promote(result, d)
    return result


def combine_tiers(higher: DType | None, lower: DType | None) -> DType | None:
    """PyTorch's rule: a lower tier of operands raises the type only to a higher category."""
    if higher is None:
        return lower
    if lower is None or category(lower) <= category(higher):
        return higher
    return dtypes.promote(higher, lower)


def result_type(ranked: Iterable[DType], zero_d: Iterable[DType], numbers: Iterable[Scalar]) -> DType | None:
    """The type of an op over tensors of rank > 0, 0-d tensors and Python numbers; None without operands."""
    return combine_tiers(promote_all(ranked),
                         combine_tiers(promote_all(zero_d), promote_all(number_dtype(n) for n in numbers)))

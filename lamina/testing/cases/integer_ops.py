"""Cases for division modes, remainders, rounding and small integer types.

Dividends of every sign meet divisors of every sign (``values="divisor"``), exact
multiples (``halves`` over ``divisor``) and random quotients; rounding meets ties
(``halves``: round is half to even). Integers of less than 32 bits take every value of
their type, so that division of ``-128`` by ``-1`` wraps around as in PyTorch. Divisors
are never zero: PyTorch raises on integer division by zero.

The views and casts of ``builtin_ops`` are checked in the small integer types here too.
"""

from __future__ import annotations

from typing import Sequence

import attrs
import torch

from lamina.testing.capabilities import FLOAT_DTYPES
from lamina.testing.cases.database import cases_for, register_cases
from lamina.testing.cases.samples import Case, T, unary_cases

SMALL_INTEGERS = ("i16", "i8", "u8")
NUMBER_DTYPES = FLOAT_DTYPES + ("i64", "i32") + SMALL_INTEGERS


def division_cases(kwargs: dict | None = None) -> list[Case]:
    """A tensor divided by a tensor: signs, exact multiples, broadcasting, views, mixed types."""
    kwargs = kwargs or {}
    return [
        Case("same_shape", (T((17, 33)), T((17, 33), values="divisor")), kwargs, compiled=True),
        Case("exact_multiples", (T((6, 7), values="halves"), T((6, 7), values="divisor")), kwargs),
        Case("random_divisors", (T((6, 7)), T((6, 7), values="nonzero")), kwargs),
        Case("broadcast", (T((4, 1, 33)), T((5, 1), values="divisor")), kwargs),
        Case("zero_d_divisor", (T((6, 7)), T((), values="divisor")), kwargs),
        Case("transposed", (T((9, 12), "transposed"), T((9, 12), "sliced", "divisor")), kwargs),
        Case("int8_divisor", (T((6, 7)), T((6, 7), values="divisor", dtype="i8")), kwargs),
    ]


def number_divisor_cases(kwargs: dict | None = None) -> list[Case]:
    """A tensor divided by a Python number of either sign, or a float (which makes an integer tensor's result float)."""
    kwargs = kwargs or {}
    return [
        Case("positive_number", (T((17, 33)), 3), kwargs, compiled=True),
        Case("negative_number", (T((9, 12), "transposed"), -2), kwargs),
        Case("float_number", (T((6, 7), values="halves"), 1.5), kwargs),
    ]


def _in_modes(cases_of) -> list[Case]:
    """The cases of both rounding modes, named after theirs."""
    return [attrs.evolve(case, name=f"{mode}_{case.name}")
            for mode in ("trunc", "floor") for case in cases_of({"rounding_mode": mode})]


register_cases("aten.div.Tensor_mode", _in_modes(division_cases) + [
    Case("true_division", (T((6, 7)), T((6, 7), values="divisor")), {"rounding_mode": None}),
], dtypes=NUMBER_DTYPES)
register_cases("aten.div.Scalar_mode", _in_modes(number_divisor_cases), dtypes=NUMBER_DTYPES)
for name, tensor_overload in (("floor_divide", "default"), ("remainder", "Tensor"), ("fmod", "Tensor")):
    register_cases(f"aten.{name}.{tensor_overload}", division_cases(), dtypes=NUMBER_DTYPES)
    register_cases(f"aten.{name}.Scalar", number_divisor_cases(), dtypes=NUMBER_DTYPES)
register_cases("aten.remainder.Scalar_Tensor", [
    Case("number_dividend", (7, T((17, 33), values="divisor")), compiled=True),
    Case("negative_dividend", (-5, T((9, 12), "sliced", "divisor"))),
], dtypes=NUMBER_DTYPES)

for name in ("floor", "ceil", "trunc", "round"):
    register_cases(f"aten.{name}.default", unary_cases("halves") + [Case("random", (T((6, 7)),))], dtypes=NUMBER_DTYPES)


def _also_in(op: str, dtypes: tuple[str, ...], cases: Sequence[Case] = ()) -> None:
    """Check ``op``'s cases of ``builtin_ops`` in ``dtypes`` as well, with ``cases`` added."""
    entry = cases_for(op)
    register_cases(op, entry.cases + tuple(cases), dtypes=entry.dtypes + dtypes, reference=entry.reference,
                   tolerance=entry.tolerance)


VIEWS = ("view.default", "_unsafe_view.default", "permute.default", "transpose.int", "t.default", "expand.default",
         "unsqueeze.default", "squeeze.default", "squeeze.dim", "squeeze.dims", "slice.Tensor", "select.int",
         "repeat.default", "clone.default", "cat.default", "stack.default")
for view in VIEWS:
    _also_in(f"aten.{view}", SMALL_INTEGERS)
_also_in("aten._to_copy.default", SMALL_INTEGERS, [
    Case("to_uint8", (T((17, 33)),), {"dtype": torch.uint8}, compiled=True),
    Case("to_int8", (T((9, 12), "transposed"),), {"dtype": torch.int8}),
    Case("to_int16", (T((6, 7)),), {"dtype": torch.int16}),
])

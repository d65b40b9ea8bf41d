"""How an expression varies across the lanes of one vector.

A thread's vector holds ``width`` adjacent elements along the innermost loop ``inner``:
lane ``l`` is at ``inner = base + l``, with ``base`` a multiple of ``width``. An integer
expression of the loop variables is then ``start + step * l`` in every lane exactly when
no division or remainder in it crosses a multiple of its divisor inside the vector:
``inner % 64 + 64`` moves by one per lane when ``width`` divides 64, and ``inner % 5``
wraps inside a vector of 2 (at 4, 5). What decides it is which values ``start`` can
take, so the analysis follows ``start``'s residue: ``start = residue (mod modulus)``
for every vector, which is also what proves a vector access aligned.

A condition is uniform when every lane of every vector gives the same answer: ``inner
< 64`` with ``width`` dividing 64 is, ``inner < 5`` with ``width`` 2 is not. A load
whose index is the same in every lane reads the same value in every lane (the position a
key-value cache is written at, ``positions[0] == i2``; the token an embedding row is
looked up for), so it counts as one unknown number; evaluating it once per vector cannot
fault, since Loop IR keeps every index in bounds whether its element uses it or not.
Divisors must be positive constants.
"""

from __future__ import annotations

import math

import attrs

from lamina.core.ir import dtypes, expr as ex, loop_ir
from lamina.core.ir.expr import Expr


@attrs.frozen
class LaneForm:
    """``start + step * lane``, where ``start`` is ``residue`` modulo ``modulus`` in every
    vector; ``modulus`` 0 means ``start`` is exactly ``residue``."""

    step: int
    modulus: int
    residue: int = attrs.field()

    @residue.validator
    def _normalised(self, _, value):
        if self.modulus and not 0 <= value < self.modulus:
            raise ValueError(f"residue {value} is not reduced modulo {self.modulus}")

    def is_aligned_to(self, width: int) -> bool:
        """Whether ``start`` is a multiple of ``width`` in every vector."""
        return self.modulus % width == 0 and self.residue % width == 0


UNKNOWN = LaneForm(0, 1, 0)
"""The same in every lane, with nothing known of its value."""


def _form(step: int, modulus: int, residue: int) -> LaneForm:
    modulus = abs(modulus)
    return LaneForm(step, modulus, residue % modulus if modulus else residue)


def lane_form(e: Expr, inner: str, width: int) -> LaneForm | None:
    """The integer expression ``e`` as ``start + step * lane``, or None where it is not
    one (a remainder that wraps inside the vector, a product of lane-varying factors,
    a load that differs between lanes)."""
    if isinstance(e, loop_ir.Load):
        return UNKNOWN if is_uniform(e, inner, width) else None
    if isinstance(e, ex.Const):
        return _form(0, 0, int(e.value)) if _is_integer(e) else UNKNOWN
    if isinstance(e, ex.Var):
        return _form(1, width, 0) if e.name == inner else UNKNOWN
    if not isinstance(e, ex.Op):
        return None
    args = [lane_form(a, inner, width) for a in e.args] if e.op != "where" else []
    if any(a is None for a in args):
        return None
    if e.op in ("add", "sub"):
        a, b = args
        sign = 1 if e.op == "add" else -1
        return _form(a.step + sign * b.step, math.gcd(a.modulus, b.modulus), a.residue + sign * b.residue)
    if e.op == "neg":
        (a,) = args
        return _form(-a.step, a.modulus, -a.residue)
    if e.op == "mul":
        return _product(*args)
    if e.op in ("mod", "floordiv"):
        return _divided(e.op, *args, width)
    if e.op == "cast" and _is_integer(e) and _is_integer(e.args[0]):
        return args[0]
    if e.op == "where":
        return UNKNOWN if all(is_uniform(a, inner, width) for a in e.args) else None
    return UNKNOWN if all(a.step == 0 for a in args) else None


def _product(a: LaneForm, b: LaneForm) -> LaneForm | None:
    if b.modulus == 0 and b.step == 0:
        a, b = b, a
    if a.modulus == 0 and a.step == 0:
        return _form(b.step * a.residue, b.modulus * a.residue, b.residue * a.residue)
    if a.step or b.step:
        return None
    modulus = math.gcd(a.modulus * b.modulus, a.modulus * b.residue, b.modulus * a.residue)
    return _form(0, modulus, a.residue * b.residue)


def _divided(name: str, a: LaneForm, d: LaneForm, width: int) -> LaneForm | None:
    """``a % d`` or ``a // d`` for a positive constant ``d``: lane by lane exactly when the
    lanes of ``a`` stay between two multiples of ``d``."""
    if d.modulus != 0 or d.residue <= 0 or a.step < 0:
        return None
    divisor = d.residue
    if a.modulus == 0:
        if a.residue % divisor + a.step * (width - 1) >= divisor:
            return None
        if name == "mod":
            return _form(a.step, 0, a.residue % divisor)
        return _form(0, 0, a.residue // divisor)
    common = math.gcd(a.modulus, divisor)
    if a.residue % common + a.step * (width - 1) >= common:
        return None
    if name == "mod":
        return _form(a.step, common, a.residue)
    if a.modulus % divisor == 0:
        return _form(0, a.modulus // divisor, a.residue // divisor)
    return UNKNOWN


_FLIPPED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}


def is_uniform(e: Expr, inner: str, width: int) -> bool:
    """Whether the condition (or any expression) ``e`` has the same value in every lane."""
    if isinstance(e, loop_ir.Load):
        return all(is_uniform(i, inner, width) for i in e.index)
    if _is_integer(e):
        form = lane_form(e, inner, width)
        return form is not None and form.step == 0
    if isinstance(e, ex.Op) and e.op in _FLIPPED and all(_is_integer(a) for a in e.args):
        return _comparison_is_uniform(e, inner, width)
    return all(is_uniform(child, inner, width) for child in e.children())


def _comparison_is_uniform(e: ex.Op, inner: str, width: int) -> bool:
    """``x < y`` is uniform when ``x - y`` is, or when it moves across the vector but no
    vector's lanes straddle the threshold (``le``, ``gt`` and ``ge`` are ``lt`` shifted or mirrored)."""
    left, right = (e.args if e.op in ("lt", "le") else e.args[::-1])
    difference = lane_form(ex.Op("sub", (left, right), dtypes.index), inner, width)
    if difference is None:
        return False
    if difference.step == 0:
        return True
    threshold = 0 if e.op in ("lt", "gt") else 1
    span = abs(difference.step) * (width - 1)
    if difference.step > 0:
        straddling = (threshold - span, threshold - 1)
    else:
        straddling = (threshold, threshold + span - 1)
    return not _takes_value_in(difference, *straddling)


def _takes_value_in(form: LaneForm, low: int, high: int) -> bool:
    """Whether ``form``'s ``start`` can lie in ``[low, high]``."""
    if form.modulus == 0:
        return low <= form.residue <= high
    first = low + (form.residue - low) % form.modulus
    return first <= high


def _is_integer(e: Expr) -> bool:
    return not e.dtype.is_float and e.dtype != dtypes.bool_

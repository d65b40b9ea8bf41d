"""Whether a condition on coordinates holds at every point of a box of them.

A causal mask is a comparison of coordinates, ``col <= row``. A schedule that knows the
first and last coordinate of a block of outputs, or of a vector of a row, can tell from
them alone whether the mask holds (or fails) at every point: then the block need not
compute what the mask throws away (``contraction/unneeded_blocks``), nor a vector be read
(``row_reduction``). Comparisons of affine integer expressions are decided exactly; ``and``,
``or`` and ``not`` of them soundly (``or`` may miss a box that its two sides cover between
them); anything else, such as a load, is left undecided.
"""

from __future__ import annotations

from typing import Mapping

from lamina.core.ir import expr as ex, index
from lamina.core.ir.expr import Expr

Box = Mapping[str, tuple[Expr, Expr]]
"""For each variable, its first and last value: expressions of whatever the schedule knows."""

_FLIPPED = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt"}


def all_of(conditions: list[Expr]) -> Expr | None:
    """The conjunction of ``conditions``, or None where there are none."""
    if not conditions:
        return None
    result = conditions[0]
    for condition in conditions[1:]:
        result = ex.op("and", result, condition)
    return result


def holds_over(condition: Expr, box: Box) -> Expr | None:
    """An expression of the box's bounds that is true only if ``condition`` holds at every
    point of ``box``, or None where it cannot tell."""
    return _everywhere(condition, box, True)


def decidable(condition: Expr) -> bool:
    """Whether ``holds_over`` can decide ``condition`` for a box of any bounds."""
    box = {name: (ex.Var(f"{name}_first"), ex.Var(f"{name}_last")) for name in ex.free_vars(condition)}
    return holds_over(condition, box) is not None


def _everywhere(condition: Expr, box: Box, truth: bool) -> Expr | None:
    """True only if ``condition`` is ``truth`` at every point of ``box``."""
    if isinstance(condition, ex.Const):
        return ex.const(bool(condition.value) == truth)
    if not isinstance(condition, ex.Op):
        return None
    name, args = condition.op, condition.args
    if name == "not":
        return _everywhere(args[0], box, not truth)
    if name in ("and", "or"):
        parts = [_everywhere(a, box, truth) for a in args]
        if (name == "and") == truth:
            return None if None in parts else ex.op("and", *parts)
        known = [p for p in parts if p is not None]
        return None if not known else known[0] if len(known) == 1 else ex.op("or", *known)
    if name in _FLIPPED:
        if not truth:
            name = _FLIPPED[name]
        span = _span(ex.op("sub", args[0], args[1]), box)
        if span is None:
            return None
        lowest, highest = span
        return {
            "lt": ex.op("lt", highest, 0), "le": ex.op("le", highest, 0),
            "gt": ex.op("gt", lowest, 0), "ge": ex.op("ge", lowest, 0),
        }[name]
    return None


def _span(difference: Expr, box: Box) -> tuple[Expr, Expr] | None:
    """The least and greatest value of an affine integer expression over ``box``."""
    if difference.dtype.is_float:
        return None
    form = index.affine(difference)
    lowest: Expr = ex.const(form.constant)
    highest: Expr = ex.const(form.constant)
    for atom, coefficient in form.terms.items():
        if not isinstance(atom, ex.Var) or atom.name not in box:
            return None
        first, last = box[atom.name]
        low, high = (first, last) if coefficient > 0 else (last, first)
        lowest = lowest + low * coefficient
        highest = highest + high * coefficient
    return index.simplify(lowest), index.simplify(highest)

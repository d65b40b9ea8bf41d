"""Whether a condition on coordinates holds at every point of a box of them.

A causal mask is a comparison of coordinates, ``col <= row``. A schedule that knows the
first and last coordinate of a block of outputs, or of a vector of a row, can tell from
them alone whether the mask holds (or fails) at every point: then the block need not
compute what the mask throws away (``contraction/unneeded_blocks``), nor a vector be read
(``row_reduction``). Comparisons of affine integer expressions are decided exactly; ``and``,
``or`` and ``not`` of them soundly (``or`` may miss a box that its two sides cover between
them); anything else, such as a load, is left undecided. Where a comparison is settled, for
a block or by the ranges of its coordinates, ``settled`` folds what it settles, so that a
block's code keeps only the part of a mask that still depends on the point.
"""

from __future__ import annotations

from typing import Mapping

from lamina.core.ir import dtypes, expr as ex, index
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


def settled(expr: Expr, ranges: index.Ranges | None = None) -> Expr:
    """``expr`` with every comparison of integers that ``ranges`` (each variable's extent)
    decides replaced by its value, and the ``and``, ``or``, ``not`` and ``where`` that such
    values settle folded: ``where(r < 0, r + n, r)`` over ``r`` in ``[0, n)`` is ``r``."""
    ranges = dict(ranges or {})

    def fold(node: Expr) -> Expr | None:
        if not isinstance(node, ex.Op):
            return None
        name, args = node.op, node.args
        if name in _FLIPPED or name in ("eq", "ne"):
            return _compared(name, args, ranges)
        known = [bool(a.value) if isinstance(a, ex.Const) and a.dtype == dtypes.bool_ else None for a in args]
        if name == "not" and known[0] is not None:
            return ex.const(not known[0], node.dtype)
        if name in ("and", "or") and node.dtype == dtypes.bool_:
            absorbing = name == "or"
            for i in (0, 1):
                if known[i] is not None:
                    return ex.const(absorbing, node.dtype) if known[i] == absorbing else args[1 - i]
        if name == "where":
            if isinstance(args[0], ex.Const):
                return ex.cast(args[1] if args[0].value else args[2], node.dtype)
            if args[1] == args[2]:
                return ex.cast(args[1], node.dtype)
        return None

    return ex.transform(expr, fold)


def with_decided(expr: Expr, term: Expr, truth: bool) -> Expr:
    """``expr`` where comparison ``term`` is ``truth``, with what that settles folded."""
    value = ex.const(truth, term.dtype)
    return settled(ex.transform(expr, lambda node: value if node == term else None))


def _compared(name: str, args: tuple[Expr, ...], ranges: index.Ranges) -> Expr | None:
    """A comparison of integers as a constant, where the ranges decide it."""
    if any(a.dtype.is_float or a.dtype == dtypes.bool_ for a in args):
        return None
    low, high = index.bounds(index.affine(ex.op("sub", args[0], args[1]), ranges), ranges)
    if low is None or high is None:
        return None
    truth = comparison_over(name, low, high)
    return None if truth is None else ex.const(truth)


def comparison_over(name: str, low: int, high: int) -> bool | None:
    """What ``d name 0`` is for every ``d`` from ``low`` to ``high``: True, False, or None
    where it differs between them."""
    holds, fails = {"lt": (high < 0, low >= 0), "le": (high <= 0, low > 0), "gt": (low > 0, high <= 0),
                    "ge": (low >= 0, high < 0), "eq": (low == high == 0, low > 0 or high < 0),
                    "ne": (low > 0 or high < 0, low == high == 0)}[name]
    return True if holds else False if fails else None

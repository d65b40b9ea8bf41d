"""Blocks whose outputs do not use the sum skip the product.

A causal mask in a contraction's epilogue, ``where(col <= row, acc * scale, -inf)``,
stores a constant wherever it is false: every block of attention's scores that lies
wholly above the diagonal (nearly half of them) would run its whole k-loop for nothing.
The epilogue says where the sum is not used (``unneeded_where``); from the block's
corner and size, the kernel works out whether that holds at every output of the block
(``holds_over_block``) and, if so, runs none of its k-tiles. The epilogue still stores
every output, so the block's outputs are exactly what they would have been.

Only conditions on the output coordinates are read, combined with ``and``, ``or`` and
``not`` from comparisons of affine expressions; a mask read from memory could be
anything, and is left to the epilogue.
"""

from __future__ import annotations

from typing import Mapping

from lamina.core.ir import expr as ex, index, loop_ir
from lamina.core.ir.expr import Expr
from lamina.plugins.schedules.contraction.recognise import Contraction

Box = Mapping[str, tuple[Expr, Expr]]
"""For each output variable, its first and last value in a block."""


def unneeded_where(c: Contraction) -> Expr | None:
    """A condition on the output coordinates under which no store of the epilogue uses the
    sum, or None where there is none that the kernel can test."""
    coordinates = set(c.extents) - {c.reduce_var}
    found = []
    for store in c.epilogue:
        value = store.value
        while isinstance(value, ex.Op) and value.op == "cast":
            value = value.args[0]
        if not (isinstance(value, ex.Op) and value.op == "where"):
            return None
        condition, used, unused = value.args
        if c.acc in ex.free_vars(unused):
            condition, used, unused = _negated(condition), unused, used
        if c.acc in ex.free_vars(unused) or not ex.free_vars(condition) <= coordinates:
            return None
        if any(isinstance(n, loop_ir.Load) for n in ex.walk(condition)):
            return None
        found.append(_negated(condition))
    if not found:
        return None
    result = found[0]
    for condition in found[1:]:
        result = ex.op("and", result, condition)
    return result


def describe(c: Contraction) -> str | None:
    """The Tile IR's note on the blocks that skip the product, or None where none can."""
    condition = unneeded_where(c)
    if condition is None:
        return None
    box = {v: (ex.Var(f"{v}_first"), ex.Var(f"{v}_last")) for v in c.extents}
    if holds_over_block(condition, box) is None:
        return None
    return f"a block where {loop_ir.format_value(condition)} at every output runs no k-tile: its outputs do not use the sum"


def holds_over_block(condition: Expr, box: Box) -> Expr | None:
    """An expression of the block's corner that is true only if ``condition`` holds at every
    point of ``box``, or None where it cannot tell."""
    return _everywhere(condition, box, True)


_FLIPPED = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt"}


def _negated(condition: Expr) -> Expr:
    """``not condition``, as the opposite comparison where it compares integers."""
    if isinstance(condition, ex.Op) and condition.op in _FLIPPED and not any(a.dtype.is_float for a in condition.args):
        return ex.op(_FLIPPED[condition.op], *condition.args)
    if isinstance(condition, ex.Op) and condition.op == "not":
        return condition.args[0]
    return ex.op("not", condition)


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

"""Dividing by a row's value as multiplying by its reciprocal, computed once per row.

A softmax divides every element of a row by the row's sum. IEEE division costs a dozen
instructions, and a dividend of zero, as every masked score's ``exp(-inf - max)`` is,
sends it down a slow path: at 128 tokens that path cost the causal attention scores
a quarter of their time on the H200 (``experiments/division/``). One reciprocal per row
and a multiply per element cost a rounding of at most one more unit in the last place.
"""

from __future__ import annotations

from typing import Iterable

from lamina.core.ir import expr as ex, loop_ir
from lamina.core.ir.expr import Expr


def divisors(stores: Iterable[loop_ir.Store], row_values: Iterable[str]) -> list[str]:
    """The names among ``row_values`` that some store's value divides by, in order."""
    wanted, found = set(row_values), []
    for store in stores:
        for node in ex.walk(store.value):
            if (isinstance(node, ex.Op) and node.op == "div" and isinstance(node.args[1], ex.Var)
                    and node.args[1].name in wanted and node.args[1].name not in found):
                found.append(node.args[1].name)
    return found


def multiplying_by_reciprocals(value: Expr, reciprocals: dict[str, str]) -> Expr:
    """``value`` with ``x / v`` written ``x * r`` for each row value ``v`` whose reciprocal is ``r``."""

    def replace(node: Expr) -> Expr | None:
        if isinstance(node, ex.Op) and node.op == "div" and isinstance(node.args[1], ex.Var):
            name = reciprocals.get(node.args[1].name)
            if name is not None:
                return ex.Op("mul", (node.args[0], ex.Var(name, node.args[1].dtype)), node.dtype)
        return None

    return ex.transform(value, replace)


def reciprocal(value: Expr) -> Expr:
    """``1 / value``, in its type."""
    return ex.op("div", ex.cast(ex.const(1), value.dtype), value)

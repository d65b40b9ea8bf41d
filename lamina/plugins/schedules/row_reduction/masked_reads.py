"""Row reads that a mask on coordinates makes unnecessary.

A causal softmax reads each score as ``where(column - row >= 1, -inf, s[row, column])``:
past the diagonal the score is never used, and at 2048 tokens that is half of what the
softmax would read. Where every use of a row access is such a branch, under one condition
on the row and the column, a thread that keeps the row in registers skips loading each
vector of it over which the condition holds at every column (``coordinate_conditions``).
"""

from __future__ import annotations

from lamina.core.ir import expr as ex, loop_ir
from lamina.core.ir.expr import Expr
from lamina.plugins.schedules.coordinate_conditions import decidable
from lamina.plugins.schedules.row_reduction.recognise import RowReduction


def skippable_where(row: RowReduction, key: tuple) -> Expr | None:
    """The condition, on the row's variables and its column, under which no loop over the
    row uses the row access ``key``, where a vector's first and last column can decide it;
    else None."""
    unused = _unused_where(row, key)
    return unused if unused is not None and decidable(unused) else None


def _unused_where(row: RowReduction, key: tuple) -> Expr | None:
    """The condition under which no loop over the row uses the row access ``key``; None where
    some use is not masked by one such condition."""
    found: set[Expr] = set()
    for phase in row.phases:
        loop = phase.loop
        if loop is None:
            continue
        column = {loop.var: ex.Var(row.column_name)}
        for s in loop.body:
            for e in loop_ir.expressions(s):
                if not _masked(e, row, key, loop.var, column, found):
                    return None
    return found.pop() if len(found) == 1 else None


def _masked(node: Expr, row: RowReduction, key: tuple, var: str, column: dict, found: set[Expr]) -> bool:
    """Whether every read of ``key`` in ``node`` is the branch that a ``where`` on coordinates
    does not choose, the other a constant; the conditions under which it is unused go to ``found``."""
    if isinstance(node, loop_ir.Load):
        return row.key(node, var) != key and all(_masked(i, row, key, var, column, found) for i in node.index)
    if isinstance(node, ex.Op) and node.op == "where":
        condition, chosen, otherwise = node.args
        if not any(isinstance(n, loop_ir.Load) for n in ex.walk(condition)):
            for constant, element, unused in ((chosen, otherwise, condition), (otherwise, chosen, ex.negated(condition))):
                if isinstance(constant, ex.Const) and isinstance(element, loop_ir.Load) and row.key(element, var) == key:
                    found.add(ex.substitute(unused, column))
                    return True
    return all(_masked(child, row, key, var, column, found) for child in node.children())

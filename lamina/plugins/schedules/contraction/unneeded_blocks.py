"""Blocks whose outputs do not use the sum skip the product.

A causal mask in a contraction's epilogue, ``where(col <= row, acc * scale, -inf)``,
stores a constant wherever it is false: every block of attention's scores that lies
wholly above the diagonal (nearly half of them) would run its whole k-loop for nothing.
The epilogue says where the sum is not used (``unneeded_where``); from the block's
corner and size, the kernel works out whether that holds at every output of the block
(``coordinate_conditions``) and, if so, runs none of its k-tiles. The epilogue still stores
every output, so the block's outputs are exactly what they would have been.

Only conditions on the output coordinates are read; a mask read from memory could be
anything, and is left to the epilogue.
"""

from __future__ import annotations

from lamina.core.ir import expr as ex, loop_ir
from lamina.core.ir.expr import Expr
from lamina.plugins.schedules.contraction.recognise import Contraction
from lamina.plugins.schedules.coordinate_conditions import all_of, decidable


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
            condition, used, unused = ex.negated(condition), unused, used
        if c.acc in ex.free_vars(unused) or not ex.free_vars(condition) <= coordinates:
            return None
        if any(isinstance(n, loop_ir.Load) for n in ex.walk(condition)):
            return None
        found.append(ex.negated(condition))
    return all_of(found)


def describe(c: Contraction) -> str | None:
    """The Tile IR's note on the blocks that skip the product, or None where none can."""
    condition = unneeded_where(c)
    if condition is None:
        return None
    if not decidable(condition):
        return None
    return f"a block where {loop_ir.format_value(condition)} at every output runs no k-tile: its outputs do not use the sum"

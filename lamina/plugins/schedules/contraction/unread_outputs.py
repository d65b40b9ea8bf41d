"""Blocks whose outputs no kernel reads store nothing, and compute nothing.

The causal scores' product stores ``where(i2 - i1 >= 1, -inf, acc * 0.125)``, and the
softmax that reads them never uses the masked ones: the fusion rule
``mark_unread_elements`` records on the scores' buffer where nothing reads it
(``Buffer.unread``). A block where that holds at every one of its outputs runs no k-tile,
as a block the mask replaces already does (``unneeded_blocks``), and stores nothing
either: at 2048 tokens, nearly half of what the product writes. The elements it leaves
unwritten are exactly those no reader uses.
"""

from __future__ import annotations

from lamina.core.ir import expr as ex, loop_ir
from lamina.core.ir.expr import Expr
from lamina.plugins.schedules.contraction.recognise import Contraction
from lamina.plugins.schedules.coordinate_conditions import all_of, decidable


def unread_where(c: Contraction) -> Expr | None:
    """A condition on the output coordinates under which no kernel reads what any store of
    the epilogue writes, or None where some store's buffer has no such condition."""
    found = []
    for store in c.epilogue:
        unread = c.kernel.buffer(store.buffer).unread
        if unread is None:
            return None
        found.append(ex.substitute(unread, {loop_ir.axis_var(a).name: i for a, i in enumerate(store.index)}))
    return all_of(found)


def describe(c: Contraction) -> str | None:
    """The Tile IR's note on the blocks that store nothing, or None where none can."""
    condition = unread_where(c)
    if condition is None or not decidable(condition):
        return None
    buffers = ", ".join(dict.fromkeys(s.buffer for s in c.epilogue))
    return (f"a block where {loop_ir.format_value(condition)} at every output runs no k-tile and stores nothing: "
            f"no kernel reads {buffers} there")

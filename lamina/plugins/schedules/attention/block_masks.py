"""A causal mask settled once per block of queries and keys, not at every score.

A decoder's mask is ``key <= query`` (in Hugging Face's models and-ed with the padding
vector's entry for the key) turned into a bias that each score adds. Over a block of queries
and a block of keys that comparison has one value wherever the key block lies wholly left of
the diagonal (it holds: every key is seen) or wholly right of it (it fails); only the blocks
that the diagonal crosses need it per score. With the comparison settled the rest of the
mask often folds away: right of the diagonal the score adds the bias's constant and reads
nothing, left of it the score reads only the padding vector. The attention kernel computes
each key block's scores with the variant that its block allows.

What the score reads of the key alone (the padding vector's entry, a condition of the key) is
settled per key block too, at run time: before it walks the keys the kernel finds the key
blocks where that condition holds for every key, and there the scores read nothing of it.
Without padding that is every key block, and the score is the product times its scale and the
causal bias: reading the padding vector at every score (an 8-byte load, a compare and a
select beside the softmax's handful of instructions) cost TinyLlama's attention at 512 tokens a
quarter of its time (``experiments/attention_padding_by_block/``).
"""

from __future__ import annotations

import attrs

from lamina.core.ir import dtypes, expr as ex, index, loop_ir
from lamina.core.ir.expr import Expr
from lamina.plugins.schedules.coordinate_conditions import Box, comparison_over, decidable, holds_over, with_decided

_COMPARISONS = ("lt", "le", "gt", "ge")


@attrs.frozen
class BlockScores:
    """The score, and where it compares its key with its query (``term``), the score where
    that comparison holds over a block (``seen``) and where it fails over it (``hidden``);
    ``shown``: a condition of the key alone that the score reads from a buffer (whether the
    padding shows the key), which a key block checks for all its keys at once."""

    general: Expr
    key: str
    query: str
    term: Expr | None = None
    seen: Expr | None = None
    hidden: Expr | None = None
    shown: Expr | None = None
    if_shown: tuple[Expr | None, Expr | None, Expr | None] = (None, None, None)
    """``general``, ``seen`` and ``hidden`` where ``shown`` holds for every key of the block
    (settled once: the cost model asks for every block of queries and keys of every setting)."""

    def if_every_key_shown(self, score: Expr) -> Expr:
        """``score`` in a key block where ``shown`` holds for every key."""
        return score if self.shown is None else with_decided(score, self.shown, True)

    def variants(self, box: Box, hidden: bool = True) -> list[tuple[Expr | None, Expr]]:
        """(condition on the box's bounds, score) pairs: a block takes the first whose
        condition holds, the last has none; ``hidden`` False leaves out the variant of blocks
        the comparison hides (a kernel that never walks them)."""
        if self.term is None:
            return [(None, self.general)]
        found = [(holds_over(self.term, box), self.seen)]
        if hidden:
            found.append((holds_over(ex.op("not", self.term), box), self.hidden))
        return [(c, s) for c, s in found if c is not None] + [(None, self.general)]

    def score_over(self, queries: range, keys: range) -> Expr:
        """The score that a block of the ``queries`` by the ``keys`` computes."""
        if self.term is None:
            return self._as_shown(0)
        form = index.affine(ex.op("sub", *self.term.args))
        low = high = form.constant
        for atom, coefficient in form.terms.items():
            span = queries if atom.name == self.query else keys
            ends = (coefficient * span[0], coefficient * span[-1])
            low, high = low + min(ends), high + max(ends)
        truth = comparison_over(self.term.op, low, high)
        return self._as_shown(0 if truth is None else 1 if truth else 2)

    def _as_shown(self, which: int) -> Expr:
        """The ``which``-th of ``general``, ``seen``, ``hidden`` in a block whose keys are all
        shown: the cost model takes the keys as a program without padding has them."""
        settled = self.if_shown[which]
        return settled if settled is not None else (self.general, self.seen, self.hidden)[which]

    def text(self, hidden: bool = True) -> str | None:
        """A line for Tile IR: the comparison settled and what each kind of block reads."""
        shown = None if self.shown is None else (
            f"a key block where {loop_ir.format_value(self.shown)} holds for every key (a flag per key block, "
            "found before the walk) reads nothing of it")
        if self.term is None:
            return shown
        failed = f", where it fails {_read_text(self.hidden)}" if hidden else ""
        compared = (f"{ex.format_expr(self.term)} settled per key block: where it holds each score reads "
                    f"{_read_text(self.seen)}{failed}; compared at each score only where the diagonal crosses the block")
        return compared if shown is None else f"{compared}; {shown}"


def _read_text(score: Expr) -> str:
    names = sorted({node.buffer for node in ex.walk(score) if _varying_read(node)})
    return ", ".join(names) if names else "nothing"


def _varying_read(node: Expr) -> bool:
    """A read at an index that moves with the coordinates: a scalar is read once, not per score."""
    return isinstance(node, loop_ir.Load) and any(ex.free_vars(i) for i in node.index)


def block_scores(score: Expr, key: str, query: str, batch: tuple[str, ...] = ()) -> BlockScores:
    """``score`` with its first comparison of ``key`` and ``query`` (``key <= query + c`` or
    any other affine comparison of the two) settled both ways, where it has one, and the
    condition it reads of the key alone (over the ``batch`` coordinates), where it has one."""
    found = BlockScores(score, key, query, shown=_key_condition(score, key, batch))
    for node in ex.walk(score):
        if isinstance(node, ex.Op) and node.op in _COMPARISONS and ex.free_vars(node) == {key, query} \
                and not any(isinstance(n, loop_ir.Load) for n in ex.walk(node)) and decidable(node):
            found = attrs.evolve(found, term=node, seen=with_decided(score, node, True),
                                 hidden=with_decided(score, node, False))
            break
    if found.shown is None:
        return found
    return attrs.evolve(found, if_shown=tuple(None if s is None else found.if_every_key_shown(s)
                                              for s in (found.general, found.seen, found.hidden)))


def _key_condition(score: Expr, key: str, batch: tuple[str, ...]) -> Expr | None:
    """The outermost condition in ``score`` that reads a buffer and depends on ``key`` and the
    ``batch`` coordinates alone (a padding vector's entry for the key), or None."""
    for node in ex.walk(score):
        if node.dtype == dtypes.bool_ and not isinstance(node, ex.Const) and key in ex.free_vars(node) \
                and ex.free_vars(node) <= {key, *batch} and any(isinstance(n, loop_ir.Load) for n in ex.walk(node)):
            return node
    return None


def reads(score: Expr) -> int:
    """Reads of buffers that ``score`` makes at indices that move with its coordinates."""
    return sum(1 for node in ex.walk(score) if _varying_read(node))


def reads_by_query(score: Expr, query: str) -> tuple[int, int]:
    """``score``'s reads at indices that move with the ``query`` coordinate (a bias of its own for
    each score), and those that move only with the others (a padding mask, one value per key)."""
    moving = [node for node in ex.walk(score) if _varying_read(node)]
    per_score = sum(1 for node in moving if any(query in ex.free_vars(i) for i in node.index))
    return per_score, len(moving) - per_score

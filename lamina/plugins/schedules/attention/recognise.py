"""Recognising attention in Loop IR: ``softmax(score) @ v`` in one kernel, the scores never stored.

The kernel that ``fuse_attention`` builds has the loops that ``loops.attention_loops`` reads,
its probabilities rounded to the 16-bit type of the values. Since all three loops run over the
same keys, a block can run them as one (the online softmax of FlashAttention): the recogniser
describes the two
products as contractions (``scores``: queries by keys over the features; ``values``: queries by
features over the keys), so that the TMA sees their operands as the Hopper GEMM does
(``contraction.wgmma_tma.operands``).
"""

from __future__ import annotations

import math

import attrs

from lamina.core.ir import dtypes, expr as ex, index, kernel_ir, loop_ir, sizes
from lamina.core.ir.expr import Expr
from lamina.core.ir.names import fresh_name
from lamina.core.ir.torch_ir import TensorType
from lamina.plugins.schedules.contraction import Contraction, NotAContraction
from lamina.plugins.schedules.contraction import analyse as analyse_contraction
from lamina.plugins.schedules.attention.block_masks import BlockScores, block_scores
from lamina.plugins.schedules.attention.loops import AttentionLoops, NotAttention, attention_loops, is_op
from lamina.plugins.schedules.contraction.wgmma_tma.operands import TmaView, factors, view
from lamina.plugins.schedules.coordinate_conditions import settled


@attrs.frozen
class Attention:
    """An attention kernel's parts: the two products as contractions over the same rows, the
    score as a function of ``scores``' sum (``scores.acc``) and its key (``scores.n``), and
    the TMA views of the queries, keys and values."""

    kernel: loop_ir.Kernel
    scores: Contraction
    values: Contraction
    score: Expr
    queries: TmaView
    keys: TmaView
    value_rows: TmaView
    dtype: dtypes.DType
    loops: AttentionLoops
    by_block: BlockScores
    """The score as each block of queries and keys computes it, its mask settled where it can be."""

    @property
    def query_var(self) -> str:
        return self.scores.m

    @property
    def batch(self) -> tuple[str, ...]:
        return self.scores.batch

    @property
    def batch_size(self) -> int:
        return math.prod(self.scores.extents[v] for v in self.batch)

    @property
    def queries_extent(self) -> int:
        return self.scores.extents[self.scores.m]

    @property
    def values_along_features(self) -> bool:
        """Whether the values are staged as they lie, along the features (N-major), not along the keys."""
        return self.value_rows.layout == kernel_ir.N_MAJOR

    @property
    def keys_extent(self) -> int:
        return self.scores.extents[self.scores.n]

    @property
    def depth(self) -> int:
        """The features a query and a key have in common (the scores' reduction)."""
        return self.scores.reduce_extent

    @property
    def features(self) -> int:
        """The features of each value (the output's last axis)."""
        return self.values.extents[self.values.n]

    @property
    def key_var(self) -> str:
        return self.scores.n

    def last_visible_key(self, query: Expr) -> Expr | None:
        """The last key that ``query`` sees where the score masks every later key (causal
        attention: ``key <= query + c``), else None."""
        return visible_bound(self.score, self.scores.n, self.scores.m, query, "last")

    def first_visible_key(self, query: Expr) -> Expr | None:
        """The first key that ``query`` sees where the score masks every earlier key (a sliding
        window: ``key > query - window``), else None."""
        return visible_bound(self.score, self.scores.n, self.scores.m, query, "first")


def analyse(kernel: loop_ir.Kernel) -> Attention:
    """The attention in ``kernel``, or ``NotAttention`` saying which part does not fit."""
    loops = attention_loops(kernel)
    value = loops.value
    if loops.rounding is None or not is_op(value, "cast", 1) or value.args[0].dtype != loops.rounding:
        raise NotAttention(f"loop kernel {kernel.name}: the values are not weighted by exp(score - maximum) / sum "
                           "rounded to their type")
    scores, values = _contractions(kernel, loops.rows, loops.max_loop, loops.score, loops.feature_loop, value,
                                   loops.rounding)
    return _checked(loops, *_along_the_most_queries(scores, values))


def _along_the_most_queries(scores: Contraction, values: Contraction) -> tuple[Contraction, Contraction]:
    """The two products with the longest of the axes that could be their rows as rows.

    Where every query head reads the same keys (one key-value head: Gemma's), the heads are rows
    of the products as much as the positions are, and a contraction takes the axis of the
    smallest output stride (the heads, as a model lays its output out); the attention kernel
    stages a block of rows of one axis, so it takes the axis with the most of them."""
    def rows(c: Contraction) -> set[str]:
        def read(side: str) -> set[str]:
            return set().union(*(ex.free_vars(i) for o in c.operands if o.side == side for i in o.load.index))
        return read("m") - read("n")

    either = rows(scores) & rows(values)
    candidates = [v for v in (scores.m, *scores.batch) if v in either]
    m = max(candidates, key=lambda v: sizes.hint(scores.extents[v]), default=scores.m)
    if m == scores.m or values.m != scores.m:
        return scores, values
    return tuple(attrs.evolve(c, m=m, batch=tuple(scores.m if v == m else v for v in c.batch))
                 for c in (scores, values))


def _contractions(kernel: loop_ir.Kernel, loops, max_loop: loop_ir.Loop, score: Expr, feature_loop: loop_ir.Loop,
                  value: Expr, dtype: dtypes.DType) -> tuple[Contraction, Contraction]:
    """The two products as contraction kernels of their own, over buffers that only these
    descriptions hold: the scores stored (queries x keys), and the values' product reading the
    probabilities from such a buffer."""
    taken = {b.name for b in kernel.inputs + kernel.outputs}
    scores_name = fresh_name("scores", taken)
    probabilities_name = fresh_name("probabilities", taken | {scores_name})
    rows = tuple(ex.Var(loop.var) for loop in loops)
    shape = tuple(loop.extent for loop in loops) + (max_loop.extent,)
    dot_init, dot_loop = max_loop.body[0], max_loop.body[1]
    scores_body = (loop_ir.Loop(max_loop.var, max_loop.extent, "parallel", (
        dot_init, dot_loop, loop_ir.Store(scores_name, rows + (ex.Var(max_loop.var),), score))),)
    scores_kernel = attrs.evolve(kernel, name=f"{kernel.name}_scores",
                                 outputs=(loop_ir.Buffer(scores_name, TensorType(shape, score.dtype)),),
                                 body=_nested(loops, scores_body))
    out_init, values_loop, *stores = feature_loop.body
    key = ex.Var(values_loop.var)
    probabilities = loop_ir.Load(probabilities_name, rows + (key,), dtype)
    summed = ex.op("mul", ex.cast(probabilities, dtypes.float32), value)
    values_body = (loop_ir.Loop(feature_loop.var, feature_loop.extent, "parallel", (
        out_init, loop_ir.Loop(values_loop.var, values_loop.extent, "reduce",
                               (loop_ir.Accumulate(out_init.acc, "sum", summed),)), *stores)),)
    values_kernel = attrs.evolve(kernel, name=f"{kernel.name}_values",
                                 inputs=kernel.inputs + (loop_ir.Buffer(probabilities_name, TensorType(shape, dtype)),),
                                 body=_nested(loops, values_body))
    try:
        return analyse_contraction(scores_kernel), analyse_contraction(values_kernel)
    except NotAContraction as e:
        raise NotAttention(f"loop kernel {kernel.name}: {e}") from None


def _nested(loops, body: tuple[loop_ir.Stmt, ...]) -> tuple[loop_ir.Stmt, ...]:
    for loop in reversed(loops):
        body = (attrs.evolve(loop, body=body),)
    return body


def values_read_as_they_lie(found: TmaView, features: int) -> bool:
    """Whether the attention kernel reads the values as ``found`` lays them out: K-major (along the
    keys), or N-major (along the features, as a model's values lie) in whole 128-byte panels, which
    the values' wgmma transposes."""
    return found.layout == kernel_ir.K_MAJOR or features % kernel_ir.SWIZZLE_PANEL == 0


def _checked(loops: AttentionLoops, scores: Contraction, values: Contraction) -> Attention:
    kernel, dtype = loops.kernel, loops.rounding
    where = f"loop kernel {kernel.name}"
    if scores.m != values.m or set(scores.batch) != set(values.batch) or scores.slice_bound or values.slice_bound:
        raise NotAttention(f"{where}: the two products do not share their rows")
    found = factors(scores), factors(values)
    if found[0] is None or found[1] is None:
        raise NotAttention(f"{where}: the products are not of two bf16 or fp16 operands each")
    (queries, keys), (probabilities, value_rows) = found
    if probabilities.load.buffer not in {b.name for b in values.kernel.inputs} - {b.name for b in kernel.inputs} \
            or queries.load.dtype != dtype or keys.load.dtype != dtype:
        raise NotAttention(f"{where}: the queries, keys and values are not all {dtype}")
    views = [view(scores, queries), view(scores, keys), view(values, value_rows)]
    for v in views:
        if isinstance(v, str):
            raise NotAttention(f"{where}: {v}")
    if views[1].layout != kernel_ir.K_MAJOR:
        raise NotAttention(f"{where}: the keys lie along the keys; the attention kernel reads them K-major, along "
                           "the features")
    if not values_read_as_they_lie(views[2], values.extents[values.n]):
        raise NotAttention(f"{where}: the values lie along their {values.extents[values.n]} features; the attention "
                           f"kernel reads them so in whole panels of {kernel_ir.SWIZZLE_PANEL}, else K-major, along "
                           "the keys (copied so by fuse_attention)")
    score = settled(scores.epilogue[0].value, scores.extents)
    return Attention(kernel, scores, values, score, *views, dtype, loops,
                     block_scores(score, scores.n, scores.m, scores.batch))


_FLIPPED = {"le": "ge", "lt": "gt", "ge": "le", "gt": "lt"}


def visible_bound(score: Expr, key: str, query: str, at: Expr, side: str) -> Expr | None:
    """Where ``score`` is ``where(key - query + c <= 0 and ..., ..., -inf)`` (``side`` "last": a
    causal mask) or ``where(key - query + c >= 0 and ...)`` (``side`` "first": a sliding window),
    however the comparison is written (``key + a <= query + b``, ``query >= key``, strict or not;
    possibly nested), the last or first key that query ``at`` sees: ``at - c``."""
    while is_op(score, "where", 3):
        condition, kept, other = score.args
        if isinstance(other, ex.Const) and other.value == -math.inf:
            for term in _conjuncts(condition):
                if not isinstance(term, ex.Op) or term.op not in _FLIPPED or len(term.args) != 2:
                    continue
                form, relation = index.affine(ex.op("sub", *term.args)), term.op
                if form.terms == {ex.Var(key): -1, ex.Var(query): 1}:
                    form, relation = form.scaled(-1), _FLIPPED[relation]
                if form.terms != {ex.Var(key): 1, ex.Var(query): -1}:
                    continue
                if side == "last" and relation in ("le", "lt"):
                    return at + (-form.constant - (1 if relation == "lt" else 0))
                if side == "first" and relation in ("ge", "gt"):
                    return at + (-form.constant + (1 if relation == "gt" else 0))
        score = kept
    return None


def _conjuncts(condition: Expr) -> list[Expr]:
    if is_op(condition, "and", 2):
        return _conjuncts(condition.args[0]) + _conjuncts(condition.args[1])
    return [condition]

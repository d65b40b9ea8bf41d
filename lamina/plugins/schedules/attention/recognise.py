"""Recognising attention in Loop IR: ``softmax(score) @ v`` in one kernel, the scores never stored.

The kernel that ``fuse_attention`` builds is, for each row of the output (batch, head, query):

    m = max over keys j of score(j)
    l = sum over keys j of exp(score(j) - m)
    for each feature f:  out[..., f] = epilogue(sum over keys j of p(j) * v[.., f, j])

where ``score(j)`` is a function (scale, mask, soft cap) of the dot product of the query's row
with key ``j``'s, computed inside each loop over the keys, and ``p(j) = exp(score(j) - m) / l``
rounded to the 16-bit type of ``v``. Since all three loops run over the same keys, a block can
run them as one (the online softmax of FlashAttention): the recogniser checks that the three
scores are one function and that the loops say exactly the above, and describes the two
products as contractions (``scores``: queries by keys over the features; ``values``: queries by
features over the keys), so that the TMA sees their operands as the Hopper GEMM does
(``contraction.wgmma_tma.operands``).
"""

from __future__ import annotations

import math

import attrs

from lamina.core.errors import ScheduleError
from lamina.core.ir import dtypes, expr as ex, index, loop_ir
from lamina.core.ir.expr import Expr
from lamina.core.ir.names import fresh_name
from lamina.core.ir.torch_ir import TensorType
from lamina.plugins.fusion import analysis
from lamina.plugins.schedules.contraction import Contraction, NotAContraction
from lamina.plugins.schedules.contraction import analyse as analyse_contraction
from lamina.plugins.schedules.contraction.wgmma_tma.operands import TmaView, factors, view
from lamina.plugins.schedules.loop_to_kernel import split_parallel_nest


class NotAttention(ScheduleError):
    """The kernel is not attention as this schedule runs it; the message says why."""


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
        return _causal_limit(self.score, self.scores.n, self.scores.m, query)


def _unwrapped_dot_loop(loop: loop_ir.Loop) -> tuple[str, loop_ir.Init, loop_ir.Loop, Expr] | None:
    """A loop over keys ``[Init dot; reduce loop summing into dot; Accumulate acc op value]``:
    (its accumulator, the dot's Init, the dot's loop, the value it accumulates)."""
    body = loop.body
    if len(body) != 3:
        return None
    init, dot_loop, accumulate = body
    if not (isinstance(init, loop_ir.Init) and isinstance(dot_loop, loop_ir.Loop) and dot_loop.kind == "reduce"
            and isinstance(accumulate, loop_ir.Accumulate) and len(dot_loop.body) == 1):
        return None
    inner = dot_loop.body[0]
    if not (isinstance(inner, loop_ir.Accumulate) and inner.acc == init.acc and inner.op == "sum"):
        return None
    return accumulate.acc, init, dot_loop, accumulate.value


def _canonical(loop: loop_ir.Loop, like: loop_ir.Loop) -> tuple[loop_ir.Stmt, ...]:
    """``loop``'s body with its key variable, dot and depth variable named as ``like``'s."""
    names = {loop.var: like.var, loop.body[0].acc: like.body[0].acc, loop.body[1].var: like.body[1].var}
    return analysis.renamed(loop.body, names)


def _is(value: Expr, op: str, arity: int) -> bool:
    return isinstance(value, ex.Op) and value.op == op and len(value.args) == arity


def _without_rounding(value: Expr, dtype: dtypes.DType) -> Expr | None:
    """``x`` from ``f32(dtype(x))``: the probability rounded to the values' type, or None."""
    if _is(value, "cast", 1) and value.dtype == dtypes.float32:
        inner = value.args[0]
        if _is(inner, "cast", 1) and inner.dtype == dtype and inner.args[0].dtype == dtypes.float32:
            return inner.args[0]
    return None


def analyse(kernel: loop_ir.Kernel) -> Attention:
    """The attention in ``kernel``, or ``NotAttention`` saying which part does not fit."""
    where = f"loop kernel {kernel.name}"
    loops, inner = split_parallel_nest(kernel.body)
    if len(loops) < 1 or len(inner) != 5:
        raise NotAttention(f"{where} is not a maximum, a sum and a loop over features inside its parallel loops")
    init_max, max_loop, init_sum, sum_loop, feature_loop = inner
    if not (isinstance(init_max, loop_ir.Init) and isinstance(init_sum, loop_ir.Init)
            and all(isinstance(s, loop_ir.Loop) and s.kind == "reduce" for s in (max_loop, sum_loop))
            and isinstance(feature_loop, loop_ir.Loop) and feature_loop.kind == "serial"):
        raise NotAttention(f"{where} is not a maximum, a sum and a loop over features inside its parallel loops")
    maximum, total = init_max.acc, init_sum.acc
    first = _unwrapped_dot_loop(max_loop)
    second = _unwrapped_dot_loop(sum_loop)
    if first is None or second is None or first[0] != maximum or second[0] != total \
            or max_loop.body[2].op != "max" or sum_loop.body[2].op != "sum" \
            or init_max.value != ex.const(-math.inf, init_max.value.dtype) or sum_loop.extent != max_loop.extent:
        raise NotAttention(f"{where}: the loops over keys do not take a maximum and then a sum of dot products")
    if not (len(feature_loop.body) >= 3 and isinstance(feature_loop.body[0], loop_ir.Init)
            and isinstance(feature_loop.body[1], loop_ir.Loop) and feature_loop.body[1].kind == "reduce"
            and all(isinstance(s, loop_ir.Store) for s in feature_loop.body[2:])):
        raise NotAttention(f"{where}: the loop over features does not sum over keys and store")
    out_init, values_loop, *stores = feature_loop.body
    third = _unwrapped_dot_loop(values_loop)
    if third is None or third[0] != out_init.acc or values_loop.body[2].op != "sum" \
            or values_loop.extent != max_loop.extent:
        raise NotAttention(f"{where}: the loop over features does not sum a product over the keys")
    score = first[3]
    canonical_sum = _canonical(sum_loop, max_loop)
    if canonical_sum[:2] != max_loop.body[:2] \
            or canonical_sum[2].value != ex.op("exp", ex.op("sub", score, ex.Var(maximum, score.dtype))):
        raise NotAttention(f"{where}: the sum is not of exp(score - maximum) over the same scores")
    canonical_values = _canonical(values_loop, max_loop)
    if canonical_values[:2] != max_loop.body[:2]:
        raise NotAttention(f"{where}: the values' loop computes other scores")
    weighted = canonical_values[2].value
    if not _is(weighted, "mul", 2):
        raise NotAttention(f"{where}: the values' loop does not sum probabilities times values")
    probability = ex.op("div", ex.op("exp", ex.op("sub", score, ex.Var(maximum, score.dtype))),
                        ex.Var(total, score.dtype))
    rounded = [i for i, (arg, other) in enumerate((weighted.args, weighted.args[::-1]))
               if other.dtype == dtypes.float32 and _is(other, "cast", 1)
               and _without_rounding(arg, other.args[0].dtype) == probability]
    if not rounded:
        raise NotAttention(f"{where}: the values are not weighted by exp(score - maximum) / sum rounded to their type")
    value = values_loop.body[2].value.args[1 - rounded[0]]
    dtype = value.args[0].dtype
    scores, values = _contractions(kernel, loops, max_loop, score, feature_loop, value, dtype)
    return _checked(kernel, scores, values, dtype)


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


def _checked(kernel: loop_ir.Kernel, scores: Contraction, values: Contraction, dtype: dtypes.DType) -> Attention:
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
    score = scores.epilogue[0].value
    return Attention(kernel, scores, values, score, *views, dtype)


def _causal_limit(score: Expr, key: str, query: str, at: Expr) -> Expr | None:
    """Where ``score`` is ``where(key <= query + c and ..., ..., -inf)`` (possibly nested, or with
    ``<``), the last visible key of query ``at``: ``at + c``."""
    while _is(score, "where", 3):
        condition, kept, other = score.args
        if isinstance(other, ex.Const) and other.value == -math.inf:
            for term in _conjuncts(condition):
                if (_is(term, "le", 2) or _is(term, "lt", 2)) and term.args[0] == ex.Var(key):
                    form = index.affine(term.args[1])
                    if form.terms == {ex.Var(query): 1}:
                        return at + (form.constant - (1 if term.op == "lt" else 0))
        score = kept
    return None


def _conjuncts(condition: Expr) -> list[Expr]:
    if _is(condition, "and", 2):
        return _conjuncts(condition.args[0]) + _conjuncts(condition.args[1])
    return [condition]

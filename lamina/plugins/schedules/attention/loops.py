"""The loops of a fused attention kernel, as ``fuse_attention`` and ``fuse_decode_attention`` build it.

For each row of the output (batch, head, query)::

    m = max over keys j of score(j)
    l = sum over keys j of exp(score(j) - m)
    for each feature f:  out[..., f] = epilogue(sum over keys j of p(j) * value(j, f))

where ``score(j)`` is a function (scale, mask, soft cap) of a dot product over the features
that queries and keys share, computed inside each loop over the keys, and ``p(j) = exp(score(j)
- m) / l``, rounded to the values' 16-bit type where the program rounds it; under a mask, 0
where ``m`` is -inf (a row the mask hides every key from gets zeros, ``zero_hidden_rows``). Both schedules that
run such a kernel (``attention`` for many queries on Hopper's tensor cores, ``attention_decode``
for a few queries split over the keys) read it through ``AttentionLoops``, which checks that the
three loops compute one score and say exactly the above.
"""

from __future__ import annotations

import math

import attrs

from lamina.core.errors import ScheduleError
from lamina.core.ir import dtypes, expr as ex, loop_ir
from lamina.core.ir.expr import Expr
from lamina.plugins.fusion import analysis
from lamina.plugins.schedules.loop_to_kernel import split_parallel_nest


class NotAttention(ScheduleError):
    """The kernel is not attention as these schedules run it; the message says why."""


@attrs.frozen
class AttentionLoops:
    """The parts of a fused attention kernel: its row loops, the loops over the keys (the
    maximum's, whose key and dot product the other two are checked against), the score, and
    the values' factor ``value`` (in the values loop's own key variable); ``rounding``, the
    type the probabilities are rounded to, or None where they are not (float32 programs)."""

    kernel: loop_ir.Kernel
    rows: tuple[loop_ir.Loop, ...] = attrs.field(converter=tuple)
    maximum: str
    total: str
    max_loop: loop_ir.Loop
    feature_loop: loop_ir.Loop
    score: Expr
    value: Expr
    rounding: dtypes.DType | None
    zero_hidden_rows: bool = False
    """Whether a row whose every score is -inf gets zeros (its sum is 0) rather than NaN."""

    def divided(self, summed: Expr, total: Expr) -> Expr:
        """The output ``summed / total`` as the program computes it for a row."""
        quotient = ex.op("div", summed, total)
        if not self.zero_hidden_rows:
            return quotient
        return ex.op("where", ex.op("eq", total, ex.const(0.0, total.dtype)), ex.const(0.0, quotient.dtype), quotient)

    @property
    def key_var(self) -> str:
        return self.max_loop.var

    @property
    def keys_extent(self) -> int:
        return self.max_loop.extent

    @property
    def dot_init(self) -> loop_ir.Init:
        return self.max_loop.body[0]

    @property
    def dot_loop(self) -> loop_ir.Loop:
        return self.max_loop.body[1]

    @property
    def values_loop(self) -> loop_ir.Loop:
        return self.feature_loop.body[1]

    @property
    def output_acc(self) -> str:
        return self.feature_loop.body[0].acc

    @property
    def stores(self) -> tuple[loop_ir.Store, ...]:
        return tuple(self.feature_loop.body[2:])


class AttentionSizes:
    """The sizes a recognised attention kernel reads off its loops (its ``loops``, an ``AttentionLoops``)."""

    __slots__ = ()
    loops: AttentionLoops

    @property
    def depth(self) -> int:
        return self.loops.dot_loop.extent

    @property
    def features(self) -> int:
        return self.loops.feature_loop.extent

    @property
    def keys_extent(self) -> int:
        return self.loops.keys_extent


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


def is_op(value: Expr, op: str, arity: int) -> bool:
    return isinstance(value, ex.Op) and value.op == op and len(value.args) == arity


def _without_rounding(value: Expr) -> tuple[Expr, dtypes.DType] | None:
    """(``x``, the type) from ``f32(type(x))``: the probability rounded to the values' type, or None."""
    if is_op(value, "cast", 1) and value.dtype == dtypes.float32:
        inner = value.args[0]
        if is_op(inner, "cast", 1) and inner.args[0].dtype == dtypes.float32:
            return inner.args[0], inner.dtype
    return None


def attention_loops(kernel: loop_ir.Kernel) -> AttentionLoops:
    """The attention loops of ``kernel``, or ``NotAttention`` saying which part does not fit."""
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
    out_init, values_loop = feature_loop.body[:2]
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
    if not is_op(weighted, "mul", 2):
        raise NotAttention(f"{where}: the values' loop does not sum probabilities times values")
    probability = ex.op("div", ex.op("exp", ex.op("sub", score, ex.Var(maximum, score.dtype))),
                        ex.Var(total, score.dtype))
    hidden = ex.op("eq", ex.Var(maximum, score.dtype), ex.const(-math.inf, score.dtype))
    zeroed = ex.op("where", hidden, ex.const(0.0, probability.dtype), probability)
    for i, (arg, other) in enumerate((weighted.args, weighted.args[::-1])):
        if other.dtype != dtypes.float32:
            continue
        unrounded = _without_rounding(arg)
        weight, rounding = unrounded if unrounded is not None else (arg, None)
        if weight not in (probability, zeroed):
            continue
        value = values_loop.body[2].value.args[1 - i]
        return AttentionLoops(kernel, loops, maximum, total, max_loop, feature_loop, score, value, rounding,
                              weight == zeroed)
    raise NotAttention(f"{where}: the values are not weighted by exp(score - maximum) / sum")


def query_and_key(a: AttentionLoops, where: str) -> tuple[Expr, Expr]:
    """The two factors of the score's dot product: the query's (which does not move with the key)
    and the key's; ``NotAttention`` where the dot product is no float32 sum of such products."""
    dot = a.dot_loop.body[0].value
    if not is_op(dot, "mul", 2) or a.dot_init.value.dtype != dtypes.float32:
        raise NotAttention(f"{where}: the score's dot product is not a float32 sum of products")
    moving = [arg for arg in dot.args if a.key_var in ex.free_vars(arg)]
    if len(moving) != 1:
        raise NotAttention(f"{where}: the dot product does not multiply a query by a key")
    return (dot.args[1] if moving[0] is dot.args[0] else dot.args[0]), moving[0]

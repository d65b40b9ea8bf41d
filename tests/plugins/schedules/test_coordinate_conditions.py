"""A condition on coordinates holds over a box only if it holds at every point of it (checked
point by point), and single comparisons and their ``and`` and ``not`` are decided exactly; a
comparison that the coordinates' ranges settle is folded away with what it settles, and one that
they do not is kept."""

import itertools
import random

import pytest

from lamina.core.ir import dtypes, expr as ex
from lamina.core.ir import loop_ir
from lamina.plugins.schedules.coordinate_conditions import holds_over, settled, with_decided

ROW, COL = ex.Var("i", dtypes.index), ex.Var("j", dtypes.index)


def _value(e, env):
    if isinstance(e, ex.Const):
        return e.value
    if isinstance(e, ex.Var):
        return env[e.name]
    args = [_value(a, env) for a in e.args]
    return {
        "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
        "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
        "and": lambda a, b: a and b, "or": lambda a, b: a or b, "not": lambda a: not a, "neg": lambda a: -a,
    }[e.op](*args)


def _conditions():
    comparisons = []
    for name, (a, b), shift in itertools.product(("lt", "le", "gt", "ge"), ((ROW, COL), (COL, ROW)), (-3, 0, 1, 5)):
        comparisons.append(ex.op(name, a - b, shift))
    comparisons.append(ex.op("ge", COL * 2 - ROW, 4))
    combined = [ex.op("and", comparisons[0], comparisons[9]), ex.op("or", comparisons[3], comparisons[12]),
                ex.op("not", comparisons[5]), ex.op("and", comparisons[2], ex.const(True))]
    return comparisons + combined


@pytest.mark.parametrize("condition", _conditions(), ids=lambda c: ex.format_expr(c))
def test_a_condition_holds_over_a_box_only_where_it_holds_at_every_point(condition):
    first_row, first_col = ex.Var("row0", dtypes.index), ex.Var("col0", dtypes.index)
    test = holds_over(condition, {"i": (first_row, first_row + 7), "j": (first_col, first_col + 3)})
    assert test is not None
    exact = condition.op != "or"  # one side may hold over part of a block and the other over the rest
    rng = random.Random(0)
    for _ in range(300):
        row0, col0 = rng.randrange(-12, 12), rng.randrange(-12, 12)
        everywhere = all(_value(condition, {"i": row0 + a, "j": col0 + b}) for a in range(8) for b in range(4))
        claimed = _value(test, {"row0": row0, "col0": col0})
        assert claimed == everywhere if exact else not claimed or everywhere


def test_a_negative_index_wrap_is_settled_by_the_range_of_a_coordinate():
    """``x[where(j < 0, j + n, j)]`` (PyTorch's negative indices) reads ``x[j]`` where ``j`` runs from 0."""
    wrapped = ex.op("where", ex.op("lt", COL, 0), COL + 16, COL)
    assert settled(wrapped, {"j": 16}) == COL
    assert settled(wrapped) == wrapped, "without a range the sign of j is unknown"
    assert settled(ex.op("lt", COL, 16), {"j": 16}) == ex.const(True)
    assert settled(ex.op("lt", COL, 15), {"j": 16}) == ex.op("lt", COL, 15), "j = 15 fails it, j = 0 passes"


def test_a_decided_comparison_folds_what_it_settles_and_keeps_the_rest():
    """A decoder's bias ``where(j <= i and keep[j], 0, -65504)``: where ``j <= i`` fails, only the
    constant is left; where it holds, only the read of ``keep``."""
    causal = ex.op("le", COL, ROW)
    keep = ex.cast(loop_ir.Load("keep", (COL,), dtypes.int64), dtypes.bool_)
    bias = ex.op("where", ex.op("and", causal, keep), ex.const(0.0, dtypes.float32), ex.const(-65504.0, dtypes.float32))
    assert with_decided(bias, causal, False) == ex.const(-65504.0, dtypes.float32)
    assert with_decided(bias, causal, True) == ex.op("where", keep, ex.const(0.0, dtypes.float32),
                                                      ex.const(-65504.0, dtypes.float32))
    either = ex.op("or", causal, keep)
    assert with_decided(either, causal, True) == ex.const(True)
    assert with_decided(either, causal, False) == keep
    assert with_decided(ex.op("not", causal), causal, True) == ex.const(False)

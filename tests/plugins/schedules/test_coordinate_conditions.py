"""A condition on coordinates holds over a box only if it holds at every point of it (checked
point by point), and single comparisons and their ``and`` and ``not`` are decided exactly."""

import itertools
import random

import pytest

from lamina.core.ir import dtypes, expr as ex
from lamina.plugins.schedules.coordinate_conditions import holds_over

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

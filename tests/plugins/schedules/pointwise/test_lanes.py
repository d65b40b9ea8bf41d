"""How expressions vary across a vector's lanes: every form and every uniform condition
the analysis claims is checked against the expression evaluated lane by lane, for every
vector of a row and every value of another loop variable."""

import operator

import pytest

from lamina.core.ir import dtypes, expr as ex, loop_ir
from lamina.plugins.schedules.pointwise.lanes import LaneForm, is_uniform, lane_form

I, J = ex.Var("i"), ex.Var("j")
ROW, OTHER = 48, 3
"""``i`` is the innermost loop (48 elements a row), ``j`` another loop (0 to 2)."""

_EVALUATE = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "floordiv": operator.floordiv,
    "mod": operator.mod, "neg": operator.neg, "lt": operator.lt, "le": operator.le, "gt": operator.gt,
    "ge": operator.ge, "eq": operator.eq, "ne": operator.ne, "and": lambda a, b: a and b,
    "or": lambda a, b: a or b, "not": operator.not_, "where": lambda c, a, b: a if c else b,
    "min": min, "max": max,
}


def evaluate(e: ex.Expr, values: dict[str, int]):
    if isinstance(e, ex.Const):
        return e.value
    if isinstance(e, ex.Var):
        return values[e.name]
    return _EVALUATE[e.op](*(evaluate(a, values) for a in e.args))


def lanes(e: ex.Expr, width: int):
    """The values of ``e`` in the lanes of every vector, with every value of ``j``."""
    for start in range(0, ROW, width):
        for j in range(OTHER):
            yield [evaluate(e, {"i": start + lane, "j": j}) for lane in range(width)]


def op(name, *args):
    return ex.op(name, *args)


INDICES = [
    I, I % 64 + 64, I % 8, (I + 4) % 8, I % 16 + 16, I % 5, I % 6 + 6, I // 8, (I + 2) // 4, I * 2, 3 - I,
    J * 12 + I, J * 6 + I, I % 16 % 8, I % 8 * 2, (I // 4) * 4 + I % 4, I + 2, op("mul", I, J),
    op("mul", J, J) * 4, op("max", J, ex.const(1)) * 8, op("max", I, ex.const(1)), op("floordiv", I, J + 1),
    op("where", op("lt", I, 24), J * 8, ex.const(0)),
]
CONDITIONS = [
    op("lt", I, 24), op("le", I, 23), op("gt", I, 23), op("ge", I, 24), op("lt", ex.const(23), I),
    op("lt", I, 5), op("le", I, 24), op("lt", op("neg", I), -24), op("lt", I - 4, 20), op("lt", I % 8, 4),
    op("lt", J, 2), op("and", op("lt", I, 24), op("lt", J, 1)), op("not", op("lt", I, 24)), op("eq", I, 24),
    op("eq", I // 8, 3), op("lt", I * 3, 72), op("lt", I * 3, 70), op("lt", I % 5, 2),
]
WIDTHS = [2, 4, 8]


@pytest.mark.parametrize("e", INDICES, ids=str)
def test_a_lane_form_is_exact_in_every_vector(e):
    for width in WIDTHS:
        form = lane_form(e, "i", width)
        if form is None:
            continue
        for values in lanes(e, width):
            start = values[0]
            assert values == [start + form.step * lane for lane in range(width)]
            assert start == form.residue if form.modulus == 0 else start % form.modulus == form.residue


@pytest.mark.parametrize("condition", CONDITIONS, ids=str)
def test_a_uniform_condition_is_the_same_in_every_lane(condition):
    for width in WIDTHS:
        if is_uniform(condition, "i", width):
            assert all(len(set(values)) == 1 for values in lanes(condition, width))


@pytest.mark.parametrize("e", INDICES + CONDITIONS, ids=str)
def test_what_is_refused_does_vary_or_wrap_somewhere(e):
    """The analysis is exact for these: a condition it does not call uniform differs
    between the lanes of some vector, and an index it gives no form has no one step
    from lane to lane that holds in every vector."""
    for width in WIDTHS:
        if e.dtype == dtypes.bool_:
            if not is_uniform(e, "i", width):
                assert any(len(set(values)) > 1 for values in lanes(e, width))
        elif lane_form(e, "i", width) is None:
            moves = {tuple(v - values[0] for v in values) for values in lanes(e, width)}
            assert len(moves) > 1 or any(len(set(b - a for a, b in zip(m, m[1:]))) > 1 for m in moves)


@pytest.mark.parametrize("width,form", [
    (2, LaneForm(1, 2, 0)), (4, LaneForm(1, 4, 0)), (8, LaneForm(1, 8, 0)), (16, LaneForm(1, 16, 0)),
])
def test_ropes_rotated_half_moves_by_one_per_lane_from_an_aligned_start(width, form):
    assert lane_form(I % 64 + 64, "i", width) == form
    assert form.is_aligned_to(width)
    assert is_uniform(op("lt", I, 64), "i", width)


def test_a_remainder_that_wraps_inside_the_vector_is_not_a_lane_form():
    """head_dim 10: the half is 5, and the vector of 2 at i = 4 holds i % 5 = 4, 0."""
    assert lane_form(I % 5 + 5, "i", 2) is None
    assert not is_uniform(op("lt", I, 5), "i", 2)
    assert lane_form(I % 6 + 6, "i", 2) == LaneForm(1, 2, 0)
    assert lane_form(I % 6 + 6, "i", 4) is None


def test_an_offset_start_is_contiguous_but_not_aligned():
    form = lane_form(J * 12 + I % 8 + 2, "i", 4)
    assert form == LaneForm(1, 4, 2) and not form.is_aligned_to(4)
    assert not lane_form(J * 6 + I, "i", 4).is_aligned_to(4)


def test_a_load_is_uniform_where_its_index_is_and_a_division_by_a_variable_never_is():
    assert not is_uniform(op("gt", loop_ir.Load("mask", (I,), dtypes.float32), 0.0), "i", 4)
    assert not is_uniform(op("lt", op("floordiv", J, J), 1), "i", 4)
    position = loop_ir.Load("positions", (ex.const(0),), dtypes.int64)  # a key-value cache's write position
    assert is_uniform(op("gt", loop_ir.Load("mask", (J,), dtypes.float32), 0.0), "i", 4)
    assert is_uniform(op("eq", position, J), "i", 4)
    assert lane_form(position * 64 + I, "i", 4) == LaneForm(1, 4, 0)
    assert lane_form(loop_ir.Load("positions", (I,), dtypes.int64) * 64 + I, "i", 4) is None

"""Sizes known only at run time (``lamina.core.ir.sizes``): arithmetic, values at a call, and
the places that need a number saying so."""

import pytest

from lamina.core.errors import InputMismatchError, SymbolicSizeError
from lamina.core.ir import expr as ex, index, sizes
from lamina.core.ir.shapes import view_groups

s0, s1 = sizes.symbol(0), sizes.symbol(1)


def test_sizes_are_expressions_of_symbols_that_print_as_people_write_them():
    assert str(sizes.numel((2, s0 + 1, 3))) == "s0 * 6 + 6"
    assert sizes.numel((4, 8)) == 32
    assert sizes.size(s0 - s0 + 5) == 5
    assert sizes.symbols((s0 * s1, 7)) == {"s0", "s1"}
    assert sizes.numel((s1, s0, 2)) == sizes.numel((s0, 2, s1))
    assert sizes.is_symbolic((1, s0)) and not sizes.is_symbolic((1, 2))


def test_a_size_takes_its_value_from_the_symbols():
    assert sizes.evaluate(s0 * 2 + 1, {"s0": 4}) == 9
    assert sizes.evaluate_shape((s0, s1 * s0, 3), {"s0": 2, "s1": 5}) == (2, 10, 3)


def test_asking_a_symbol_for_a_number_is_a_symbolic_size_error():
    with pytest.raises(SymbolicSizeError, match="s0 is known only at run time"):
        s0 > 3
    with pytest.raises(SymbolicSizeError):
        range(s0)


def test_a_call_binds_each_symbol_and_checks_every_size():
    shapes = [("x", (s0, 3)), ("y", (s0 + 1,))]
    assert sizes.bind(shapes, [(4, 3), (5,)]) == {"s0": 4}
    with pytest.raises(InputMismatchError, match=r"input y has shape \[6\].*s0 = 4"):
        sizes.bind(shapes, [(4, 3), (6,)])
    with pytest.raises(InputMismatchError, match="at least 1"):
        sizes.bind(shapes, [(0, 3), (1,)])


def test_a_symbol_binds_from_a_multiple_of_it_plus_a_number():
    """A batch of four sequences flattened (``s0 * 4``) or a cache one longer (``s1 + 1``) gives its symbol."""
    shapes = [("x", (s0 * 4, 64)), ("y", (s1 + 1, s0 * 2))]
    assert sizes.bind(shapes, [(12, 64), (8, 6)]) == {"s0": 3, "s1": 7}
    with pytest.raises(InputMismatchError, match=r"input x has shape \[13, 64\]"):
        sizes.bind(shapes, [(13, 64), (8, 6)])  # no whole s0 gives 13 rows
    assert sizes.given_symbol(s0 * s1) is None and sizes.given_symbol(s0 // 2) is None


def test_hints_weigh_costs_where_a_compile_has_them():
    assert sizes.hint(s0 * 4) == 4 * sizes.UNHINTED
    with sizes.hinted({"s0": 10}):
        assert sizes.hint(s0 * 4 + 1) == 41
    assert sizes.hint(7) == 7


def test_a_coordinate_over_a_symbolic_extent_needs_no_division():
    r = ex.Var("r")
    assert index.simplify(r % s1, {"r": s1}) == r
    assert index.simplify(r // s1, {"r": s1}) == ex.const(0)
    assert index.simplify(r // (s1 // s1) % s1, {"r": s1}) == r
    assert str(index.simplify(r % s1, {"r": s0})) == "r % s1"
    assert index.simplify(r // ((s0 + 1) // (s0 + 1)) % (s0 + 1), {"r": s0 + 1}) == r
    assert index.simplify(ex.const(0) % s0) == ex.const(0)


def test_a_whole_multiple_of_a_size_divides_by_it():
    """A view's ``-1`` along heads: ``s0 * 64 // (s0 * 16)`` elements per row of 16."""
    assert index.simplify((s0 * 64) // (s0 * 16)) == ex.const(4)
    assert index.simplify((s0 * 64) % (s0 * 16)) == ex.const(0)
    assert index.simplify((s0 * s1 * 6 + 6) // (s1 * s0 * 3 + 3)) == ex.const(2)
    assert str(index.simplify((s0 * 64 + 16) // (s0 * 16))) == "(s0 * 64 + 16) // (s0 * 16)"
    assert str(index.simplify((s0 * 6) // (s0 * 4))) == "s0 * 6 // (s0 * 4)"


def test_views_keep_symbolic_axes_whole_and_refuse_what_they_cannot_prove():
    assert view_groups((1, 4, s0, 16), (4, s0, 16)) == [([0, 1], [0]), ([2], [1]), ([3], [2])]
    assert view_groups((2, s0), (s0 * 2,)) == [([0, 1], [0])]
    assert view_groups((s0, s1), (s1, s0)) == [([0, 1], [0, 1])]
    with pytest.raises(SymbolicSizeError, match="need not be equal"):
        view_groups((s0, 4), (4, s1))


def test_blocks_cover_a_count_whether_it_is_a_number_or_a_symbol():
    assert sizes.blocks(130, 128) == 2 and sizes.blocks(128, 128) == 1 and sizes.blocks(0, 128) == 1
    assert str(sizes.blocks(s0 + 1, 32)) == "s0 // 32 + 1"
    assert sizes.evaluate(sizes.blocks(s0 + 1, 32), {"s0": 31}) == 1
    assert sizes.evaluate(sizes.blocks(s0 + 1, 32), {"s0": 32}) == 2

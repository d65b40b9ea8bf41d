"""How wide each copy into a staged tile is, and which padding keeps its writes free of bank conflicts."""

from lamina.plugins.schedules.contraction.copy_layout import (
    CopyOrder,
    bank_conflicts,
    choose_copy_order,
    choose_padding,
    coordinates,
    copies,
)


def test_a_row_contiguous_tile_is_copied_16_bytes_at_a_time_without_padding():
    assert choose_padding((16, 64), 4, contiguous=1, widest=4) == 0
    order = choose_copy_order((16, 64), 0, 4, contiguous=1, widest=4)
    assert order == CopyOrder(1, width=4)
    assert copies(order, (16, 64)) == 256
    assert [coordinates(order, (16, 64), e) for e in (0, 1, 16, 17)] == [(0, 0), (0, 4), (1, 0), (1, 4)]
    assert bank_conflicts(order, (16, 64), 0, 4) == 0


def test_padding_that_breaks_alignment_narrows_the_copies():
    assert choose_copy_order((16, 64), 1, 4, contiguous=1, widest=4).width == 1
    assert choose_copy_order((16, 64), 2, 4, contiguous=1, widest=4).width == 2


def test_the_global_layout_bounds_the_width():
    assert choose_copy_order((16, 64), 0, 4, contiguous=1, widest=2).width == 2
    assert choose_copy_order((16, 64), 0, 8, contiguous=1, widest=2).width == 2


def test_a_column_contiguous_tile_is_padded_against_the_conflicts_of_its_column_writes():
    assert bank_conflicts(choose_copy_order((16, 64), 0, 4, contiguous=0), (16, 64), 0, 4) > 0
    padding = choose_padding((16, 64), 4, contiguous=0)
    assert padding > 0
    assert bank_conflicts(choose_copy_order((16, 64), padding, 4, contiguous=0), (16, 64), padding, 4) == 0


def test_a_one_dimensional_tile_has_no_padding_and_may_be_wide():
    assert choose_padding((32,), 4, contiguous=0, widest=4) == 0
    assert choose_copy_order((32,), 0, 4, contiguous=0, widest=4) == CopyOrder(0, width=4)


def test_rows_kept_16_byte_aligned_are_padded_by_four_and_written_a_few_columns_at_a_time():
    for tile in ((16, 16), (16, 64), (16, 128), (32, 64)):
        padding = choose_padding(tile, 4, contiguous=0, alignment=4)
        order = choose_copy_order(tile, padding, 4, contiguous=0)
        assert padding % 4 == 0 and order.warp_columns > 1
        assert bank_conflicts(order, tile, padding, 4) == 0


def test_a_warp_writing_four_columns_eight_deep_covers_every_bank_once():
    order = CopyOrder(0, warp_columns=4)
    assert [coordinates(order, (16, 64), e) for e in (0, 1, 8, 31, 32, 64)] == [
        (0, 0), (1, 0), (0, 1), (7, 3), (8, 0), (0, 4)]
    assert sorted(coordinates(order, (16, 64), e) for e in range(16 * 64)) == [
        (k, m) for k in range(16) for m in range(64)]
    assert bank_conflicts(order, (16, 64), 4, 4) == 0
    assert bank_conflicts(order, (16, 64), 0, 4) > 0

"""What the row-reduction schedule decides, as its Tile IR shows it, and how it refuses bad knobs."""

import pytest

from lamina.core.errors import ScheduleError
from lamina.core.ir import tile_ir
from lamina.core.target import Target
from lamina.plugins.schedules.row_reduction import RowReductionSchedule

from .programs import BY_ID, loop_kernel

SM_90 = Target("sm_90", "sm_90")
SCHEDULE = RowReductionSchedule()

RMS_NORM_TILE = """\
tile mul_1  schedule=row_reduction
  grid (13, 1, 1) blocks of 256 threads
  parallel i0 (13): block.x tile 1 = thread.y 1 x 1 per thread (contiguous)
  reduce r0 (2048): block_tree, 256 splits
  threads = 256
  rows_per_block = 1
  elements_per_thread = 8
  row_in_registers = True"""

SOFTMAX_TILE = """\
tile softmax  schedule=row_reduction
  grid (15, 1, 1) blocks of 128 threads
  parallel i0 (57): block.x tile 4 = thread.y 4 x 1 per thread (contiguous)
  reduce r0 * r1 (100): warp_shuffle, 32 splits
  threads = 32
  rows_per_block = 4
  elements_per_thread = 4
  row_in_registers = True"""


def tile(program_id, rows, length, knobs=None):
    return SCHEDULE.schedule(loop_kernel(BY_ID[program_id], rows, length), SM_90, knobs or {})


def decisions(t):
    return t.reduction.strategy, dict(t.knobs)


def test_rms_norm_tile_ir_of_a_tinyllama_row():
    assert tile_ir.format_tile_kernel(tile("rms_norm", 13, 2048)) == RMS_NORM_TILE


def test_softmax_tile_ir_of_short_rows():
    assert tile_ir.format_tile_kernel(tile("softmax", 57, 100)) == SOFTMAX_TILE


@pytest.mark.parametrize("rows, length, strategy, threads, elements", [
    (200, 128, "warp_shuffle", 32, 4),
    (200, 1000, "warp_shuffle", 32, 32),
    (8, 2048, "block_tree", 256, 8),
    (8, 3584, "block_tree", 512, 7),
    (8, 32000, "block_tree", 1024, 32),
])
def test_short_rows_get_a_warp_and_long_rows_a_block(rows, length, strategy, threads, elements):
    got_strategy, knobs = decisions(tile("softmax", rows, length))
    assert (got_strategy, knobs["threads"], knobs["elements_per_thread"]) == (strategy, threads, elements)
    assert knobs["row_in_registers"] is True


def test_a_row_of_two_arrays_too_many_for_one_warps_registers_gets_a_block():
    strategy, knobs = decisions(tile("add_rms_norm", 200, 1000))
    assert (strategy, knobs["threads"], knobs["elements_per_thread"]) == ("block_tree", 128, 8)


def test_few_rows_of_moderate_length_get_a_block_each_to_fill_the_gpu():
    strategy, knobs = decisions(tile("softmax", 3, 1000))
    assert (strategy, knobs["threads"], knobs["rows_per_block"]) == ("block_tree", 128, 1)


def test_a_row_too_long_for_registers_is_read_again():
    _, knobs = decisions(tile("softmax", 2, 151936))
    assert (knobs["threads"], knobs["row_in_registers"]) == (1024, False)


def test_a_row_read_by_one_loop_only_is_not_kept_in_registers():
    _, knobs = decisions(tile("sum", 5, 100))
    assert knobs["row_in_registers"] is False


def test_pinned_knobs_are_taken_and_shown():
    t = tile("softmax", 9, 300, {"threads": 64, "rows_per_block": 2, "row_in_registers": False})
    assert decisions(t) == ("block_tree", {"threads": 64, "rows_per_block": 2, "elements_per_thread": 5,
                                           "row_in_registers": False})
    assert t.threads_per_block == 128
    assert t.grid_shape() == {"x": 5, "y": 1, "z": 1}


@pytest.mark.parametrize("knobs, message", [
    ({"threads": 48}, "threads = 48 .* power of two between 32"),
    ({"threads": 16}, "threads = 16"),
    ({"threads": 2048}, "threads = 2048"),
    ({"threads": True}, "threads = True"),
    ({"threads": 256, "rows_per_block": 8}, "rows_per_block = 8 .* up to 4"),
    ({"rows_per_block": 3}, "rows_per_block = 3"),
    ({"row_in_registers": "yes"}, "row_in_registers = 'yes' .* true or false"),
    ({"threads": 32, "row_in_registers": True}, "row_in_registers = true needs 94 registers"),
])
def test_unusable_knobs_are_schedule_errors(knobs, message):
    with pytest.raises(ScheduleError, match=message):
        tile("softmax", 5, 3000, knobs)

"""What the row-reduction schedule decides, as its Tile IR shows it, and how it refuses bad knobs."""

import pytest

from lamina.backends.cuda.targets import SM90 as SM_90
from lamina.core.errors import ScheduleError
from lamina.core.ir import tile_ir
from lamina.plugins.schedules.row_reduction import RowReductionSchedule, analyse, decide, latency
from lamina.plugins.schedules.row_reduction.tiling import RowDecisions

from .programs import BY_ID, compile_program, loop_kernel

SCHEDULE = RowReductionSchedule()

RMS_NORM_TILE = """\
tile mul_1  schedule=row_reduction
  grid (2048, 1, 1) blocks of 256 threads
  parallel i0 (2048): block.x tile 1 = thread.y 1 x 1 per thread (contiguous)
  reduce r0 (2048): block_tree, 256 splits
  vector width 4
  threads = 256
  rows_per_block = 1
  elements_per_thread = 8
  row_in_registers = True
  vector_loads = x[i0, column], w[column]
  vector_stores = mul_1[i0, column]"""

ONE_ROW_RMS_NORM_TILE = """\
tile mul_1  schedule=row_reduction
  grid (1, 1, 1) blocks of 512 threads
  parallel i0 (1): block.x tile 1 = thread.y 1 x 1 per thread (contiguous)
  reduce r0 (2048): block_tree, 512 splits
  vector width 4
  threads = 512
  rows_per_block = 1
  elements_per_thread = 4
  row_in_registers = True
  prefetch_epilogue_reads = w[column], loaded with the row
  vector_loads = x[0, column], w[column]
  vector_stores = mul_1[0, column]"""

SOFTMAX_TILE = """\
tile softmax  schedule=row_reduction
  grid (250, 1, 1) blocks of 128 threads
  parallel i0 (1000): block.x tile 4 = thread.y 4 x 1 per thread (contiguous)
  reduce r0 * r1 (100): warp_shuffle, 32 splits
  vector width 4
  threads = 32
  rows_per_block = 4
  elements_per_thread = 4
  row_in_registers = True
  vector_loads = x[i0, column]
  vector_stores = softmax[i0, column]"""

BF16_SOFTMAX_TILE = """\
tile softmax  schedule=row_reduction
  grid (5, 1, 1) blocks of 32 threads
  parallel i0 (5): block.x tile 1 = thread.y 1 x 1 per thread (contiguous)
  reduce r0 * r1 (136): warp_shuffle, 32 splits
  vector width 8
  threads = 32
  rows_per_block = 1
  elements_per_thread = 8
  row_in_registers = True
  vector_loads = x[i0, column]
  vector_stores = softmax[i0, column]"""


def tile(program_id, rows, length, knobs=None):
    return SCHEDULE.schedule(loop_kernel(BY_ID[program_id], rows, length), SM_90, knobs or {})


def decisions(t):
    return t.reduction.strategy, dict(t.knobs)


def test_rms_norm_tile_ir_of_tinyllama_rows():
    """Many rows: a block per row, each thread two vectors of four, the row kept in registers."""
    assert tile_ir.format_tile_kernel(tile("rms_norm", 2048, 2048)) == RMS_NORM_TILE


def test_rms_norm_tile_ir_of_one_tinyllama_row():
    """One row: the norm is one kernel, a block as wide as makes the row's critical path
    shortest, a vector per thread, the row kept in registers."""
    (norm,) = compile_program(BY_ID["rms_norm"], 1, 2048).loop.kernels
    assert tile_ir.format_tile_kernel(SCHEDULE.schedule(norm, SM_90, {})) == ONE_ROW_RMS_NORM_TILE


def test_softmax_tile_ir_of_short_rows():
    assert tile_ir.format_tile_kernel(tile("softmax", 1000, 100)) == SOFTMAX_TILE


def test_bf16_rows_move_eight_elements_at_a_time():
    assert tile_ir.format_tile_kernel(tile("softmax_bf16", 5, 136)) == BF16_SOFTMAX_TILE


@pytest.mark.parametrize("program_id, length, width", [
    ("softmax", 33, 1),
    ("softmax", 102, 2),
    ("softmax", 300, 4),
    ("softmax_bf16", 300, 4),
    ("causal_softmax", 12, 4),
])
def test_the_vector_width_is_16_bytes_halved_until_the_row_divides(program_id, length, width):
    assert tile(program_id, 3, length).vector_width == width


@pytest.mark.parametrize("rows, length, strategy, threads, elements", [
    (200, 128, "warp_shuffle", 32, 4),
    (200, 1000, "warp_shuffle", 32, 32),
    (200, 2048, "block_tree", 256, 8),
    (200, 3584, "block_tree", 512, 8),
    (8, 2048, "block_tree", 512, 4),
    (8, 3584, "block_tree", 1024, 4),
    (8, 32000, "block_tree", 1024, 32),
])
def test_short_rows_get_a_warp_and_long_rows_a_block(rows, length, strategy, threads, elements):
    got_strategy, knobs = decisions(tile("softmax", rows, length))
    assert (got_strategy, knobs["threads"], knobs["elements_per_thread"]) == (strategy, threads, elements)
    assert knobs["row_in_registers"] is True


@pytest.mark.parametrize("length, threads, elements, kept_threads", [
    (2048, 256, 8, 256),
    (3584, 256, 16, 512),
    (5632, 256, 24, 1024),
    (18944, 256, 76, 1024),
])
def test_long_rows_read_once_give_each_thread_at_least_eight_elements(length, threads, elements, kept_threads):
    """A matrix-vector product's rows: nothing is kept, so fewer threads (256 at most) with more
    loads each, where a row kept in registers (softmax's) gets at most eight elements per thread."""
    strategy, knobs = decisions(tile("sum", 200, length))
    assert (strategy, knobs["threads"], knobs["elements_per_thread"]) == ("block_tree", threads, elements)
    assert knobs["row_in_registers"] is False
    assert decisions(tile("softmax", 200, length))[1]["threads"] == kept_threads


@pytest.mark.parametrize("length, threads, elements", [
    (2048, 128, 16),
    (5632, 256, 24),
    (18944, 256, 80),
])
def test_long_16_bit_rows_read_once_give_each_thread_at_least_two_vectors(length, threads, elements):
    """Eight bf16 elements are a single 16-byte load: a thread gets two vectors or more in flight."""
    strategy, knobs = decisions(tile("sum_bf16", 200, length))
    assert (strategy, knobs["threads"], knobs["elements_per_thread"]) == ("block_tree", threads, elements)
    assert tile("sum_bf16", 200, length).vector_width == 8


def test_a_row_of_two_arrays_too_many_for_one_warps_registers_gets_a_block():
    strategy, knobs = decisions(tile("add_rms_norm", 200, 1000))
    assert (strategy, knobs["threads"], knobs["elements_per_thread"]) == ("block_tree", 128, 8)


def test_few_rows_of_moderate_length_get_a_block_each_to_fill_the_gpu():
    strategy, knobs = decisions(tile("softmax", 3, 1000))
    assert (strategy, knobs["threads"], knobs["rows_per_block"], knobs["elements_per_thread"]) == (
        "block_tree", 256, 1, 4)


def test_few_short_rows_get_a_block_each_to_spread_over_the_sms():
    strategy, knobs = decisions(tile("softmax", 57, 100))
    assert (strategy, knobs["threads"], knobs["rows_per_block"]) == ("warp_shuffle", 32, 1)


def test_few_rows_take_the_thread_count_with_the_shortest_critical_path():
    """Each thread walks fewer elements with more threads, but the combining steps grow."""
    row = analyse(loop_kernel(BY_ID["rms_norm"], 2, 3584))
    timed = {}
    for threads in (32, 64, 128, 256, 512, 1024):
        elements = RowDecisions(threads, 1, True, 4).elements_per_thread(3584)
        timed[threads] = latency.row_us(row, threads, elements, True, 32)
    assert min(timed, key=timed.get) == 1024 == decide(row, SM_90, {}).threads
    assert timed[32] > 1.5 * timed[1024]


def test_reads_that_wait_for_the_reduction_are_a_second_pass_over_memory():
    """RMSNorm's weight, read only after the reduction, waits for it unless loaded with the row."""
    row = analyse(loop_kernel(BY_ID["rms_norm"], 2048, 2048))
    assert row.reads_after_a_reduction
    elements = RowDecisions(256, 1, True, 8).elements_per_thread(2048)
    early = latency.row_us(row, 256, elements, True, 32)
    late = latency.row_us(row, 256, elements, True, 32, reads_late=True)
    assert late - early == pytest.approx(latency.MEMORY_LATENCY_US)
    assert latency.row_us(row, 256, elements, False, 32, reads_late=True) == latency.row_us(
        row, 256, elements, False, 32)  # a row read again by every loop waits for each pass already


def test_a_row_too_long_for_registers_is_read_again():
    _, knobs = decisions(tile("softmax", 2, 151936))
    assert (knobs["threads"], knobs["row_in_registers"]) == (1024, False)


def test_a_row_read_by_one_loop_only_is_not_kept_in_registers():
    _, knobs = decisions(tile("sum", 5, 100))
    assert knobs["row_in_registers"] is False


def test_pinned_knobs_are_taken_and_shown():
    t = tile("softmax", 9, 300, {"threads": 64, "rows_per_block": 2, "row_in_registers": False, "vector_width": 1})
    assert decisions(t) == ("block_tree", {"threads": 64, "rows_per_block": 2, "elements_per_thread": 5,
                                           "row_in_registers": False})
    assert t.threads_per_block == 128
    assert t.grid_shape() == {"x": 5, "y": 1, "z": 1}
    assert t.vector_width == 1


def test_the_weight_of_few_rows_is_loaded_with_a_row_kept_in_registers_unless_pinned_not_to_be():
    assert dict(tile("rms_norm", 1, 2048).knobs)["prefetch_epilogue_reads"] == "w[column], loaded with the row"
    assert "prefetch_epilogue_reads" not in dict(tile("rms_norm", 1, 2048, {"prefetch_epilogue_reads": False}).knobs)
    assert "prefetch_epilogue_reads" not in dict(tile("rms_norm", 1, 2048, {"row_in_registers": False}).knobs)


def test_the_weight_of_many_rows_is_read_after_the_reduction_unless_pinned():
    assert "prefetch_epilogue_reads" not in dict(tile("rms_norm", 2048, 2048).knobs)
    assert "prefetch_epilogue_reads" in dict(tile("rms_norm", 2048, 2048, {"prefetch_epilogue_reads": True}).knobs)


def test_a_softmax_has_no_reads_to_load_early():
    assert "prefetch_epilogue_reads" not in dict(tile("softmax", 9, 300).knobs)


@pytest.mark.parametrize("width, elements", [(2, 6), (8, 8)])
def test_a_pinned_vector_width_is_taken(width, elements):
    """Eight fp32 elements are 32 bytes: they move in two 16-byte accesses."""
    t = tile("softmax", 9, 296, {"threads": 64, "vector_width": width})
    assert (t.vector_width, dict(t.knobs)["elements_per_thread"]) == (width, elements)


@pytest.mark.parametrize("knobs, message", [
    ({"threads": 48}, "threads = 48 .* power of two between 32"),
    ({"threads": 16}, "threads = 16"),
    ({"threads": 2048}, "threads = 2048"),
    ({"threads": True}, "threads = True"),
    ({"threads": 256, "rows_per_block": 8}, "rows_per_block = 8 .* up to 4"),
    ({"rows_per_block": 3}, "rows_per_block = 3"),
    ({"row_in_registers": "yes"}, "row_in_registers = 'yes' .* true or false"),
    ({"threads": 32, "row_in_registers": True}, "row_in_registers = true needs 96 registers"),
    ({"vector_width": 3}, "vector_width = 3 .* power of two from 1"),
    ({"vector_width": 32}, "vector_width = 32"),
    ({"vector_width": 16}, "vector_width = 16 .* row of 3000 does not divide .* pin a width that divides 3000"),
])
def test_unusable_knobs_are_schedule_errors(knobs, message):
    with pytest.raises(ScheduleError, match=message):
        tile("softmax", 5, 3000, knobs)


@pytest.mark.parametrize("knobs, message", [
    ({"prefetch_epilogue_reads": 1}, "prefetch_epilogue_reads = 1 .* true or false"),
    ({"prefetch_epilogue_reads": True, "row_in_registers": False}, "prefetch_epilogue_reads = true needs the row kept in registers"),
])
def test_unusable_prefetch_epilogue_reads_are_schedule_errors(knobs, message):
    with pytest.raises(ScheduleError, match=message):
        tile("rms_norm", 1, 2048, knobs)


def test_a_softmax_pinned_to_load_early_is_a_schedule_error():
    with pytest.raises(ScheduleError, match="prefetch_epilogue_reads = true needs .* reads after a reduction"):
        tile("softmax", 9, 300, {"prefetch_epilogue_reads": True})

"""Warps as patches of threads and blocks down groups of grid rows: the rules, the pins, the kernels."""

import pytest

from lamina.core.errors import ScheduleError, VerificationError
from lamina.core.ir import kernel_ir, tile_ir
from lamina.plugins.schedules.contraction import ContractionSchedule, analyse
from lamina.plugins.schedules.contraction.arrangement import (
    choose_grouped_rows, choose_warp_columns, elements_read, warp_patch,
)
from lamina.plugins.schedules.contraction.knobs import Choices
from lamina.plugins.schedules.contraction.settings import ContractionSettings

from ..contraction_kernels import SM_90, linear, matmul

SCHEDULE = ContractionSchedule()
BLOCK_OF_8X8_TILES = Choices(128, 128, 16, 8, 8, fragment_width=4)


def test_the_squarest_warp_reads_the_fewest_operand_elements():
    assert elements_read(BLOCK_OF_8X8_TILES, 16) == 2 * 8 + 16 * 8
    assert elements_read(BLOCK_OF_8X8_TILES, 8) == elements_read(BLOCK_OF_8X8_TILES, 4) == 4 * 8 + 8 * 8
    assert choose_warp_columns(BLOCK_OF_8X8_TILES) == 8


def test_warps_that_cuda_numbers_alike_need_no_patch():
    assert warp_patch(Choices(128, 128, 16, 8, 8, warp_columns=8)) == (4, 8)
    assert warp_patch(Choices(128, 128, 16, 8, 8, warp_columns=16)) is None
    assert warp_patch(Choices(8, 256, 16, 1, 4, warp_columns=32)) is None


def test_blocks_keep_cudas_order_when_one_wave_holds_the_grid():
    tinyllama_o = analyse(linear(2048, 2048, 2048).kernel)
    assert choose_grouped_rows(tinyllama_o, BLOCK_OF_8X8_TILES, wave=264) == 1
    qwen_gate_up = analyse(linear(2048, 3584, 37888).kernel)
    assert choose_grouped_rows(qwen_gate_up, BLOCK_OF_8X8_TILES, wave=264) == 16


def test_pinned_arrangement_reaches_the_tile_ir_and_the_kernel():
    case = matmul(17, 19, 65)
    knobs = {"warp_columns": 4, "grouped_rows": 2, "block_m": 8, "block_n": 64, "thread_m": 1, "thread_n": 2}
    tile = SCHEDULE.schedule(case.kernel, SM_90, knobs)
    assert (tile.settings.warp_patch, tile.settings.grouped_rows) == ((8, 4), 2)
    text = tile_ir.format_tile_kernel(tile)
    assert "  warps of 8 x 4 threads (y by x)\n" in text
    assert "  blocks run down groups of 2 grid rows, column by column\n" in text
    kernel = SCHEDULE.lower(tile, SM_90)
    declared = {s.var for s in kernel.body if isinstance(s, kernel_ir.Declare)}
    assert {"thread_col", "thread_row", "block_col", "block_row"} <= declared


def test_a_patch_that_does_not_tile_the_block_is_refused_with_the_reason():
    with pytest.raises(ScheduleError, match="warps of 32 x 1 threads do not tile the block's 16 x 16 threads"):
        SCHEDULE.schedule(matmul(64, 16, 64).kernel, SM_90,
                          {"warp_columns": 1, "block_m": 64, "block_n": 64, "thread_m": 4, "thread_n": 4})


def test_warp_columns_must_be_a_power_of_two_up_to_32():
    with pytest.raises(ScheduleError, match="knob warp_columns = 6 must be one of 1, 2, 4, 8, 16, 32"):
        SCHEDULE.schedule(matmul(64, 16, 64).kernel, SM_90, {"warp_columns": 6})


def test_the_tile_ir_verifier_checks_the_warp_patch():
    tile = SCHEDULE.schedule(matmul(64, 16, 64).kernel, SM_90, {})
    with pytest.raises(VerificationError, match="a warp patch of 4 x 4 threads is not 32 threads"):
        tile_ir.verify_tile_kernel(tile_ir.TileKernel(tile.kernel, tile.schedule, tile.grid, tile.reduction,
                                                      tile.stages, settings=ContractionSettings(warp_patch=(4, 4))))

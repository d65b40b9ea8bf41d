"""The next k-tile's copies spread over the first steps of k: the rule, the pins, the kernels."""

import pytest
import torch

import lamina
from lamina.bench.measure import float64_reference, relative_error
from lamina.core.errors import ScheduleError, VerificationError
from lamina.core.ir import kernel_ir, tile_ir
from lamina.plugins.schedules.contraction import ContractionSchedule, analyse
from lamina.plugins.schedules.contraction.copy_issue import default_copy_steps, step_of_copy
from lamina.plugins.schedules.contraction.knobs import Choices
from lamina.plugins.schedules.contraction.settings import ContractionSettings

from ..contraction_kernels import FMA, SM_90, batched, half_inputs, linear, matmul, simulate_case

SCHEDULE = ContractionSchedule()
BLOCK_OF_8X8_TILES = Choices(128, 128, 16, 8, 8, fragment_width=4)


def test_long_reductions_spread_their_copies_over_half_of_a_k_tiles_steps():
    tinyllama_o = analyse(linear(2048, 2048, 2048).kernel)
    assert default_copy_steps(tinyllama_o, BLOCK_OF_8X8_TILES, asynchronous=True) == 8
    tile = SCHEDULE.schedule(tinyllama_o.kernel, SM_90, FMA)
    assert tile.settings.copy_steps == 8
    assert "  the next k-tile's copies issued over the first 8 steps of each k-tile\n" in \
        tile_ir.format_tile_kernel(tile) + "\n"


def test_short_reductions_register_copies_three_buffers_and_small_tiles_issue_copies_at_once():
    scores = analyse(batched(32, 2048, 64, 2048).kernel)
    assert default_copy_steps(scores, BLOCK_OF_8X8_TILES, asynchronous=True) == 0
    long = analyse(linear(2048, 2048, 2048).kernel)
    assert default_copy_steps(long, BLOCK_OF_8X8_TILES, asynchronous=False) == 0
    three_buffers = Choices(128, 128, 16, 8, 8, buffers=3, fragment_width=4)
    assert default_copy_steps(long, three_buffers, asynchronous=True) == 0
    assert SCHEDULE.schedule(half_inputs(64, 512, 64).kernel, SM_90, {}).settings.copy_steps == 0
    small_tiles = Choices(8, 128, 16, 4, 4, fragment_width=4)
    assert default_copy_steps(long, small_tiles, asynchronous=True) == 0


def test_copies_are_dealt_in_order_to_the_first_steps():
    assert [step_of_copy(i, 16, 8) for i in range(16)] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7]
    assert [step_of_copy(i, 3, 8) for i in range(3)] == [0, 2, 5]


def test_each_step_issues_its_copies_and_the_last_commits_them():
    knobs = {"copy_steps": 3, "block_m": 64, "block_n": 64, "thread_m": 4, "thread_n": 4, "block_k": 8, "in_block_k_splits": 1}
    tile = SCHEDULE.schedule(matmul(64, 100, 64).kernel, SM_90, knobs)
    text = kernel_ir.format_kernel(SCHEDULE.lower(tile, SM_90))
    loop = text[text.index("unrolled for kk"):]
    steps = [loop.index(f"if kk == {step}:") for step in range(3)]
    assert steps == sorted(steps) and "if kk == 3" not in loop
    assert loop.count("cp.async commit") == 1 and loop.index("cp.async commit") > steps[-1]


@pytest.mark.parametrize("knobs", [
    {"copy_steps": 1},
    {"copy_steps": 3, "block_k": 8, "in_block_k_splits": 1},
    {"copy_steps": 8, "block_k": 8, "in_block_k_splits": 1},
    {"copy_steps": 2, "block_k": 8, "in_block_k_splits": 4, "thread_m": 2, "thread_n": 2},
], ids=["one_step", "three_of_eight", "every_step", "with_k_splits"])
@pytest.mark.parametrize("case", [matmul(17, 100, 19, name="ragged_17x100x19"), batched(3, 9, 45, 20),
                                  linear(5, 300, 33, bias_relu=True)], ids=lambda c: c.id)
def test_spread_copies_match_pytorch_without_races(case, knobs):
    kernel = SCHEDULE.lower(SCHEDULE.schedule(case.kernel, SM_90, knobs), SM_90)
    inputs = case.inputs()
    out, report = simulate_case(case, kernel, inputs)
    assert relative_error(out, float64_reference(case.reference, tuple(inputs.values()))) < 1e-5
    assert (report.races, report.out_of_bounds, report.unwritten_reads, report.misaligned) == ([], [], [], [])


def test_the_rule_spreads_the_copies_of_a_ragged_long_reduction_correctly():
    case = linear(70, 300, 130, bias_relu=True)
    tile = SCHEDULE.schedule(case.kernel, SM_90, {"block_m": 64, "block_n": 64, "thread_m": 8, "thread_n": 8})
    assert (tile.reduction.splits, tile.settings.copy_steps) == (2, 4)  # two k-splits of 8 steps each
    inputs = case.inputs()
    out, report = simulate_case(case, SCHEDULE.lower(tile, SM_90), inputs)
    assert relative_error(out, float64_reference(case.reference, tuple(inputs.values()))) < 1e-5
    assert report.races == []


def test_a_negative_copy_steps_is_refused():
    with pytest.raises(ScheduleError, match="knob copy_steps = -1 must be 0"):
        SCHEDULE.schedule(matmul(64, 64, 64).kernel, SM_90, {"copy_steps": -1})


def test_more_steps_than_a_k_tile_has_are_refused_with_the_reason():
    with pytest.raises(ScheduleError, match="copy_steps = 9 exceeds the 8 steps of k of a k-tile"):
        SCHEDULE.schedule(matmul(64, 64, 64).kernel, SM_90, {"copy_steps": 9, "block_k": 8, "in_block_k_splits": 1})


def test_copies_through_registers_or_into_three_buffers_cannot_be_spread():
    with pytest.raises(ScheduleError, match="copy_steps = 2 needs cp.async copies into two buffers"):
        SCHEDULE.schedule(matmul(64, 64, 64).kernel, SM_90, {"copy_steps": 2, "buffers": 3})
    with pytest.raises(ScheduleError, match="copies through registers"):
        SCHEDULE.schedule(half_inputs(64, 512, 64).kernel, SM_90, {"copy_steps": 2})


def test_the_tile_ir_verifier_checks_the_copy_steps():
    tile = SCHEDULE.schedule(matmul(64, 64, 64).kernel, SM_90, {"block_k": 16, "in_block_k_splits": 1})
    with pytest.raises(VerificationError, match="copies spread over 17 steps, where a k-tile has 16"):
        tile_ir.verify_tile_kernel(tile_ir.TileKernel(tile.kernel, tile.schedule, tile.grid, tile.reduction,
                                                      tile.stages, settings=ContractionSettings(copy_steps=17)))


def test_pinned_copy_steps_keep_a_product_and_its_row_softmax_apart():
    def scores(q, k):
        return torch.softmax(q @ k.transpose(-1, -2) * 0.125, -1)

    q, k = torch.randn(1, 4, 128, 64), torch.randn(1, 4, 128, 64)
    fused = lamina.Compiler(target="sm_90").compile(scores, (q, k)).compilation.tiles
    two_steps = {"copy_steps": 2}  # matmul_row_reduction refuses it, the contraction takes it
    pinned = {"contraction": two_steps, "matmul_row_reduction": two_steps}
    apart = lamina.Compiler(knobs=pinned, target="sm_90").compile(scores, (q, k)).compilation.tiles
    assert [t.schedule for t in fused] == ["matmul_row_reduction"]
    assert [(t.schedule, t.settings.copy_steps if t.settings else 0) for t in apart] == [("contraction", 2), ("row_reduction", 0)]

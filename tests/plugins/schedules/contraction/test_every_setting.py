"""Every knob setting the cost model may choose, run by the simulator and compiled by NVRTC."""

import pytest

from lamina.bench.measure import float64_reference, relative_error
from lamina.plugins.schedules.contraction import ContractionSchedule, analyse, candidates, lower_contraction
from lamina.plugins.schedules.contraction import arrangement
from lamina.plugins.schedules.contraction.cost import estimate
from lamina.plugins.schedules.contraction.tiling import tile_kernel

from ..contraction_kernels import SM_90, batched, linear, matmul, simulate_case
from ..nvrtc_in_background import start_compiling

CASES = [
    matmul(17, 65, 19, name="ragged_17x65x19"),
    matmul(33, 40, 45, name="ragged_33x40x45"),
    linear(1, 65, 19),
    batched(3, 9, 24, 20),
    linear(9, 33, 20, bias_relu=True),
]

SETTINGS = [(case, choices) for case in CASES for choices in candidates(analyse(case.kernel), SM_90)]


def _id(choices) -> str:
    c = choices
    return f"{c.block_m}x{c.block_n}x{c.block_k}-t{c.thread_m}x{c.thread_n}-s{c.splits}-b{c.buffers}-f{c.fragment_width}"


def test_the_settings_stay_few_enough_to_run_each():
    assert len(SETTINGS) < 60


@pytest.mark.parametrize("case, choices", SETTINGS, ids=[f"{case.id}-{_id(ch)}" for case, ch in SETTINGS])
def test_setting_matches_pytorch_and_compiles_without_spills(case, choices):
    c = analyse(case.kernel)
    arranged = arrangement.arranged(c, choices, estimate(c, choices, SM_90).resident, SM_90)
    kernel = lower_contraction(tile_kernel(c, arranged, SM_90, []), SM_90)
    compiling = start_compiling(kernel, "sm_90")
    inputs = case.inputs()
    out, report = simulate_case(case, kernel, inputs)
    assert relative_error(out, float64_reference(case.reference, tuple(inputs.values()))) < 1e-5
    assert (report.races, report.out_of_bounds, report.unwritten_reads, report.misaligned) == ([], [], [], [])
    assert report.total_bank_conflicts == 0, report.bank_conflicts
    compiled = compiling.result()
    assert (compiled.spill_stores, compiled.spill_loads) == (0, 0)


PINNED = {
    "three_buffers": {"buffers": 3},
    "three_buffers_shallow_k": {"buffers": 3, "block_k": 8, "in_block_k_splits": 1},
    "four_splits_of_a_shallow_k_tile": {"block_k": 8, "in_block_k_splits": 4, "thread_m": 2, "thread_n": 2},
    "register_tile_8x4": {"thread_m": 8, "thread_n": 4, "block_m": 32, "block_n": 32},
    "single_reads_of_a_4x4_tile": {"fragment_width": 1, "thread_m": 4, "thread_n": 4, "block_m": 32, "block_n": 32},
    "reads_in_fours_with_padding_8": {"fragment_width": 4, "padding": 8, "block_m": 32, "block_n": 32},
    "warps_of_8x4_threads": {"warp_columns": 4, "thread_m": 2, "thread_n": 2, "block_m": 32, "block_n": 32},
    "warps_in_cuda_order": {"warp_columns": 16, "thread_m": 2, "thread_n": 2, "block_m": 32, "block_n": 32},
    "blocks_down_groups_of_2_rows": {"grouped_rows": 2, "thread_m": 1, "thread_n": 2, "block_m": 4, "block_n": 16},
}


@pytest.mark.parametrize("knobs", PINNED.values(), ids=list(PINNED))
@pytest.mark.parametrize("case", [CASES[0], CASES[3]], ids=[CASES[0].id, CASES[3].id])
def test_pinned_settings_outside_the_choices_match_pytorch(case, knobs):
    schedule = ContractionSchedule()
    kernel = schedule.lower(schedule.schedule(case.kernel, SM_90, knobs), SM_90)
    compiling = start_compiling(kernel, "sm_90")
    inputs = case.inputs()
    out, report = simulate_case(case, kernel, inputs)
    assert relative_error(out, float64_reference(case.reference, tuple(inputs.values()))) < 1e-5
    assert (report.races, report.out_of_bounds, report.unwritten_reads, report.misaligned) == ([], [], [], [])
    compiled = compiling.result()
    assert (compiled.spill_stores, compiled.spill_loads) == (0, 0)

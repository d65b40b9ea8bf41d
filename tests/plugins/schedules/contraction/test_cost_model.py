"""The cost model's choices: large tiles for large shapes, k-splits for decoding, pinned knobs obeyed."""

import pytest

from lamina.backends.cuda.codegen import emit_cuda, kernel_symbol
from lamina.backends.cuda.nvrtc import compile_kernel
from lamina.bench.measure import float64_reference, relative_error
from lamina.core.errors import ScheduleError
from lamina.core.ir import tile_ir
from lamina.plugins.schedules.contraction import ContractionSchedule, analyse, candidates, estimate
from lamina.plugins.schedules.contraction.cost import choose
from lamina.plugins.selection.cost_model import CostModelPolicy

from ..contraction_kernels import SM_90, linear, matmul, simulate_case

SCHEDULE = ContractionSchedule()
QWEN_QKV = linear(2048, 3584, 4608)
QWEN_GATE_UP_DECODE = linear(1, 3584, 37888)


def chosen(case, pinned=None):
    return choose(analyse(case.kernel), SM_90, pinned or {}, "test")[0]


def test_large_shapes_get_large_block_and_register_tiles():
    choices = chosen(QWEN_QKV)
    assert (choices.thread_m, choices.thread_n) == (8, 8)
    assert choices.block_m * choices.block_n >= 64 * 128
    assert choices.splits == 1


def test_decoding_splits_k_inside_the_block():
    choices = chosen(QWEN_GATE_UP_DECODE)
    assert choices.block_m == 1 and choices.splits > 1


def test_small_register_tiles_are_estimated_slower_on_large_shapes():
    c = analyse(QWEN_QKV.kernel)
    by_tile = {}
    for setting in candidates(c, SM_90):
        time = estimate(c, setting, SM_90).total_us
        key = setting.thread_m * setting.thread_n
        by_tile[key] = min(time, by_tile.get(key, time))
    assert by_tile[4] > by_tile[16] > by_tile[64]


def test_a_pinned_knob_wins():
    choices = chosen(QWEN_QKV, {"thread_m": 4, "thread_n": 4, "block_k": 8})
    assert (choices.thread_m, choices.thread_n, choices.block_k) == (4, 4, 8)
    assert all(s.block_k == 8 for s in candidates(analyse(QWEN_QKV.kernel), SM_90, {"block_k": 8}))


def test_pinned_knobs_outside_the_usual_ranges_are_still_legal_settings():
    choices = chosen(matmul(17, 65, 19), {"block_m": 48, "thread_m": 3})
    assert (choices.block_m, choices.thread_m) == (48, 3)


def test_pins_that_leave_nothing_legal_say_why():
    with pytest.raises(ScheduleError, match="block_n = 128 can run: about .* registers per thread exceed 255"):
        chosen(QWEN_QKV, {"thread_m": 16, "thread_n": 16, "block_m": 128, "block_n": 128})


def test_tile_ir_prints_the_choice_and_its_estimate():
    tile = SCHEDULE.schedule(QWEN_QKV.kernel, SM_90, {"splits": 1})
    knobs = dict(tile.knobs)
    assert knobs["chosen"].endswith("pinned: splits=1")
    assert knobs["estimate"].startswith(f"{SCHEDULE.estimate_cost(QWEN_QKV.kernel, SM_90):.1f} us from launch 2.0")
    assert "dynamic" not in tile_ir.format_tile_kernel(tile)


def test_the_estimate_grows_with_the_work():
    small = SCHEDULE.estimate_cost(linear(128, 3584, 4608).kernel, SM_90)
    assert SM_90.launch_us < small < SCHEDULE.estimate_cost(QWEN_QKV.kernel, SM_90)


def test_the_choice_for_a_ragged_shape_matches_pytorch():
    case = matmul(33, 100, 45)
    kernel = SCHEDULE.lower(SCHEDULE.schedule(case.kernel, SM_90, {}), SM_90)
    inputs = case.inputs()
    out, report = simulate_case(case, kernel, inputs)
    assert relative_error(out, float64_reference(case.reference, tuple(inputs.values()))) < 1e-5
    assert (report.races, report.out_of_bounds, report.unwritten_reads, report.misaligned) == ([], [], [], [])
    assert report.total_bank_conflicts == 0


class _Unestimated:
    name = "unestimated"


def test_the_selection_policy_prefers_the_estimated_contraction():
    assert CostModelPolicy().choose(QWEN_QKV.kernel, [_Unestimated(), SCHEDULE], SM_90) is SCHEDULE


@pytest.mark.parametrize("case", [QWEN_QKV, linear(128, 3584, 4608), QWEN_GATE_UP_DECODE], ids=["2048", "128", "1"])
def test_the_choices_for_model_shapes_compile_without_spills(case):
    kernel = SCHEDULE.lower(SCHEDULE.schedule(case.kernel, SM_90, {}), SM_90)
    compiled = compile_kernel(emit_cuda(kernel), kernel_symbol(kernel), "sm_90")
    assert (compiled.spill_stores, compiled.spill_loads) == (0, 0)

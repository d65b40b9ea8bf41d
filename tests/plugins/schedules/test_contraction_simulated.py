"""Contraction kernels run by the Kernel IR simulator against eager PyTorch, with their faults and bank conflicts."""

import attrs
import pytest

from lamina.bench.measure import float64_reference, relative_error
from lamina.core.ir import dtypes
from lamina.plugins.schedules.contraction import ContractionSchedule

from .contraction_kernels import (
    SM_90,
    batched,
    broadcast,
    half_inputs,
    linear,
    matmul,
    matmul_a_transposed,
    row_scaled,
    running_example,
    simulate_case,
)

SCHEDULE = ContractionSchedule()

CASES = [
    running_example(),
    matmul(17, 65, 19, name="ragged_17x65x19"),
    batched(3, 20, 24, 36),
    linear(33, 40, 45),
    broadcast((2, 2), 9, 21, 35),
    linear(18, 33, 40, bias_relu=True),
    matmul_a_transposed(35, 20, 30),
    row_scaled(21, 30, 17),
]

KNOBS = {
    "defaults": {},
    "one_buffer": {"buffers": 1},
    "two_buffers": {"buffers": 2},
    "wide_register_tile_short_k": {"block_m": 64, "block_n": 16, "block_k": 8},
    "small_rows_deep_k": {"block_m": 16, "block_n": 48, "block_k": 32},
    "k_tile_not_dividing_threads": {"block_k": 5, "buffers": 2},
}


def run(case, knobs, target=SM_90):
    tile = SCHEDULE.schedule(case.kernel, target, knobs)
    kernel = SCHEDULE.lower(tile, target)
    inputs = case.inputs()
    out, report = simulate_case(case, kernel, inputs)
    expected = float64_reference(case.reference, tuple(inputs.values()))
    return out, expected, report


def assert_clean(report):
    assert (report.races, report.out_of_bounds, report.unwritten_reads) == ([], [], [])


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_matches_pytorch_with_default_decisions(case):
    out, expected, report = run(case, {})
    assert relative_error(out, expected) < 1e-5
    assert_clean(report)


@pytest.mark.parametrize("knobs", KNOBS.values(), ids=list(KNOBS))
@pytest.mark.parametrize("case", [CASES[1], CASES[2], CASES[5]], ids=[CASES[i].id for i in (1, 2, 5)])
def test_matches_pytorch_with_pinned_decisions(case, knobs):
    out, expected, report = run(case, knobs)
    assert relative_error(out, expected) < 1e-5
    assert_clean(report)


COPIES = {
    "float64_cp_async_8_bytes": (matmul(19, 37, 21, dtype=dtypes.float64), SM_90, ("cp.async", 8)),
    "float16_loads_and_stores": (half_inputs(19, 37, 21), SM_90, ("load_store", 2)),
    "sm_75_loads_and_stores": (matmul(19, 37, 21), attrs.evolve(SM_90, name="sm_75", arch="sm_75"), ("load_store", 4)),
}


@pytest.mark.parametrize("name", COPIES)
def test_copies_other_than_four_byte_cp_async(name):
    case, target, copy = COPIES[name]
    assert {(s.copy, s.copy_bytes) for s in SCHEDULE.schedule(case.kernel, target, {}).stages} == {copy}
    out, expected, report = run(case, {}, target)
    assert relative_error(out, expected) < 1e-5
    assert_clean(report)


LAYOUTS = {
    "row_major_operands": matmul(40, 48, 40),
    "transposed_weight": linear(40, 48, 40),
    "transposed_rows_operand": matmul_a_transposed(40, 48, 40),
}


@pytest.mark.parametrize("case", LAYOUTS.values(), ids=list(LAYOUTS))
def test_padded_tiles_have_no_bank_conflicts(case):
    _, _, report = run(case, {})
    assert report.bank_conflicts and report.total_bank_conflicts == 0, report.bank_conflicts


@pytest.mark.parametrize(
    "case, k_major_copy",
    [(LAYOUTS["row_major_operands"], "a_tile"), (LAYOUTS["transposed_weight"], "w_tile")],
    ids=["row_major_operands", "transposed_weight"],
)
def test_unpadded_tiles_written_down_their_columns_conflict(case, k_major_copy):
    _, _, report = run(case, {"padding": 0})
    assert report.bank_conflicts[k_major_copy] > 0

"""Which kernels the row-reduction schedule takes, and what it expects them to cost."""

import attrs
import pytest
import torch

import lamina
from lamina.core.ir import expr as ex, loop_ir
from lamina.plugins.schedules.row_reduction import (
    NotARowReduction,
    RowReductionSchedule,
    analyse,
    decide,
    estimate_cost,
    latency,
)
from lamina.plugins.schedules.row_reduction.cost import SCALAR_EFFICIENCY, VECTOR_EFFICIENCY, moved_bytes

from .programs import BY_ID, PROGRAMS, loop_kernel
from .test_tiling import SM_90

SCHEDULE = RowReductionSchedule()


def first_kernel(fn, *shapes):
    inputs = tuple(torch.randn(s) for s in shapes)
    return lamina.Compiler().specialize(fn, inputs).compilation.loop.kernels[0]


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.id for p in PROGRAMS])
def test_every_row_program_is_a_row_reduction(program):
    kernel = loop_kernel(program, 5, 100)
    assert SCHEDULE.applies(kernel, SM_90)
    assert analyse(kernel).length == 100


def test_reductions_one_after_the_other_are_read_from_one_register_copy_of_the_row():
    row = analyse(loop_kernel(BY_ID["softmax"], 5, 100))
    assert row.reduce_vars == ("r0", "r1")
    (shared,) = row.shared_reads
    assert shared[0] == "x" and row.readers[shared] == 3


@pytest.mark.parametrize("fn, shapes, reason", [
    (lambda x, w: torch.nn.functional.linear(x, w), ((6, 40), (7, 40)), "as a matmul does"),
    (lambda a, b: a @ b, ((6, 40), (40, 7)), "stride other than 1"),
    (lambda x: x.sum(0), ((40, 64),), "stride other than 1"),
    (lambda x, y: x * y + 1.0, ((4, 33), (33,)), "no reduce loop"),
], ids=["linear", "matmul", "column_sum", "elementwise"])
def test_other_kernels_are_left_to_other_schedules(fn, shapes, reason):
    kernel = first_kernel(fn, *shapes)
    assert not SCHEDULE.applies(kernel, SM_90)
    with pytest.raises(NotARowReduction, match=reason):
        analyse(kernel)


def test_an_accumulator_that_does_not_start_from_the_identity_is_refused():
    """Each thread starts its partial result from the Init value: 1.0 would be added once per thread."""
    kernel = loop_kernel(BY_ID["sum"], 5, 100)
    (rows,) = kernel.body
    init, *rest = rows.body
    shifted = attrs.evolve(kernel, body=(attrs.evolve(rows, body=(attrs.evolve(init, value=ex.const(1.0)), *rest)),))
    loop_ir.verify_kernel(shifted)
    with pytest.raises(NotARowReduction, match="not the identity of sum"):
        analyse(shifted)


def test_cost_is_the_bytes_moved_once_at_the_documented_bandwidth():
    kernel = loop_kernel(BY_ID["add_rms_norm"], 64, 3584)
    bytes_moved = 4 * (64 * 3584 * 4 + 3584)
    expected = bytes_moved / (SM_90.memory_bytes_per_us * VECTOR_EFFICIENCY) + SM_90.launch_us
    assert SCHEDULE.estimate_cost(kernel, SM_90) == pytest.approx(expected)


def test_single_elements_move_at_a_lower_efficiency():
    kernel = loop_kernel(BY_ID["sum"], 4096, 999)
    expected = 4 * (4096 * 999 + 4096) / (SM_90.memory_bytes_per_us * SCALAR_EFFICIENCY) + SM_90.launch_us
    assert SCHEDULE.estimate_cost(kernel, SM_90) == pytest.approx(expected)


def test_a_row_read_again_costs_its_bytes_again():
    row = analyse(loop_kernel(BY_ID["softmax"], 2, 151936))
    decisions = decide(row, SM_90, {})
    once = 2 * 2 * 151936 * 4
    again = 2 * 151936 * 4 * 2
    assert not decisions.row_in_registers
    assert moved_bytes(row, decisions) == once + again


def test_few_long_rows_cost_their_critical_path():
    """Two rows cannot spread over the GPU: each row's passes and steps, not the bandwidth, bound them."""
    kernel = loop_kernel(BY_ID["softmax"], 2, 151936)
    row = analyse(kernel)
    decisions = decide(row, SM_90, {})
    bandwidth = moved_bytes(row, decisions) / (SM_90.memory_bytes_per_us * VECTOR_EFFICIENCY)
    path = latency.row_us(row, 1024, decisions.elements_per_thread(151936), False, 32)
    assert path > bandwidth
    assert estimate_cost(kernel, SM_90) == pytest.approx(path + SM_90.launch_us)


@pytest.mark.parametrize("program_id", ["rms_norm", "add_rms_norm", "softmax", "mean_keepdim", "causal_softmax"])
def test_the_selection_policy_picks_it_for_row_programs(program_id):
    program = BY_ID[program_id]
    inputs = program.inputs(5, 100)
    compilation = lamina.Compiler().specialize(program.fn, inputs).compilation
    assert [t.schedule for t in compilation.tiles] == ["row_reduction"]

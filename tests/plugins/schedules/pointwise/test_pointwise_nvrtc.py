"""Every pointwise kernel compiles with NVRTC for sm_90 and keeps its vectors in registers:
no spills and no stack, for every setting the schedule chooses or accepts."""

import itertools

import pytest

from lamina.backends.cuda import compile_kernel, emit_cuda
from lamina.backends.cuda.targets import SM90 as SM_90
from lamina.core.errors import ScheduleError
from lamina.plugins.schedules.pointwise import PointwiseSchedule

from .kernels import BF16, F32, cast, cat_last, rope, silu_up
from .test_pointwise_numerics import CASES

SCHEDULE = PointwiseSchedule()


def assert_in_registers(kernel):
    compiled = compile_kernel(emit_cuda(kernel), kernel.name, "sm_90")
    assert (compiled.spill_stores, compiled.spill_loads, compiled.stack_bytes) == (0, 0, 0), (
        f"{kernel.name}: {compiled.registers} registers, {compiled.spill_stores} B spilled")


CHOSEN = [c for c in CASES if c.kernel.name in ("rope", "cat_last")
          or c.kernel.outputs[0].type.shape in ((7, 100), (100, 7), (5, 48), (48, 5))]


@pytest.mark.parametrize("case", CHOSEN, ids=[c.id for c in CHOSEN])
def test_chosen_settings_compile_without_spills(case):
    assert_in_registers(SCHEDULE.lower(SCHEDULE.schedule(case.kernel, SM_90, {}), SM_90))


HEAVIEST = [silu_up((5, 48), BF16), rope(2, 3, 128, F32), rope(2, 3, 128, BF16), cast((5, 48), F32)]
PINNED = list(itertools.product([1, 8, 16], [2, 8], [256, 512]))


@pytest.mark.parametrize("case", HEAVIEST, ids=[c.id for c in HEAVIEST])
def test_every_accepted_pinned_setting_compiles_without_spills(case):
    """Widths up to 16 elements (several accesses per vector) and up to 8 vectors per
    thread, with the most registers a thread has (256 threads) and the fewest the schedule
    allows (512): each setting is either refused with a ScheduleError or compiles into
    registers only. (Every width, vector count and thread count of sm_90 was swept this
    way once; these are the corners.)"""
    accepted = 0
    for width, per_thread, threads in PINNED:
        knobs = {"vector_width": width, "vectors_per_thread": per_thread, "threads": threads}
        try:
            tile = SCHEDULE.schedule(case.kernel, SM_90, knobs)
        except ScheduleError as error:
            assert "registers" in str(error)
            continue
        assert_in_registers(SCHEDULE.lower(tile, SM_90))
        accepted += 1
    assert accepted >= len(PINNED) // 2


def test_a_cat_of_eight_bfloat16_parts_branches_and_keeps_its_vectors_in_registers():
    """Eight parts, eight copies of the arithmetic, one per branch: no ``?:`` between
    bfloat16 register arrays, which would take their addresses."""
    assert_in_registers(SCHEDULE.lower(SCHEDULE.schedule(cat_last(2, (8,) * 8, BF16).kernel, SM_90, {}), SM_90))

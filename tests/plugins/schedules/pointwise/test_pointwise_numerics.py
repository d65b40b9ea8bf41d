"""Pointwise kernels on the Kernel IR simulator against eager PyTorch, for every knob setting
the schedule can take: results match, and no access is out of bounds, misaligned or racing."""

import pytest

from lamina.backends.cuda.targets import SM90 as SM_90
from lamina.plugins.schedules.pointwise import PointwiseSchedule

from .kernels import (
    BF16,
    F32,
    broadcast_column,
    broadcast_row,
    cast,
    cat_last,
    every_width,
    relative_error,
    rope,
    run_on_simulator,
    silu_up,
    tolerance,
    transpose,
    transposed_store,
)

SCHEDULE = PointwiseSchedule()

SHAPES = [(3, 5), (7, 100), (2, 130), (5, 48)]
"""Rows of 5 (no vector fits), 100 (4 but not 8), 130 (2 only) and 48 (up to 16); none a
multiple of the block."""
BUILDERS = [silu_up, cast, broadcast_row, broadcast_column, transpose, transposed_store]
ROPE_SHAPES = [(2, 3, 128), (1, 2, 64), (1, 3, 10), (3, 2, 12)]
"""head_dim 128 and 64 rotate by halves every vector width divides; 12 by 6, which only
vectors of 2 do not straddle; 10 by 5, which vectors of 2 straddle (scalar rotated loads)."""
CAT_PARTS = [(8, 4, 12), (6, 10)]
"""Parts that vectors of 4 fit (every part a vector, under its branches), and parts of 6
and 10 that only vectors of 2 fit."""

CASES = [build(shape, dtype) for dtype in (F32, BF16) for build in BUILDERS for shape in SHAPES]
CASES += [rope(*shape, dtype) for dtype in (F32, BF16) for shape in ROPE_SHAPES]
CASES += [cat_last(3, parts, dtype) for dtype in (F32, BF16) for parts in CAT_PARTS]

SETTINGS = {
    "chosen": {},
    "two_vectors_of_32": {"vectors_per_thread": 2, "threads": 32},
    "eight_vectors_of_32": {"vectors_per_thread": 8, "threads": 32},
    "four_vectors_of_512": {"vectors_per_thread": 4, "threads": 512},
}


def check(case, knobs, target=SM_90):
    kernel = SCHEDULE.lower(SCHEDULE.schedule(case.kernel, target, knobs), target)
    inputs = case.inputs()
    out, report = run_on_simulator(case, kernel, inputs)
    expected = case.reference(*(t.double() for t in inputs))
    assert out.shape == expected.shape
    assert relative_error(out, expected) < tolerance(case)
    assert (report.out_of_bounds, report.misaligned, report.races, report.unwritten_reads) == ([], [], [], [])
    return kernel


@pytest.mark.parametrize("knobs", SETTINGS.values(), ids=list(SETTINGS))
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_matches_pytorch(case, knobs):
    check(case, knobs)


WIDTH_CASES = [(case, width) for case in CASES for width in every_width(case.kernel.outputs[0].type.shape[-1])]


@pytest.mark.parametrize("case,width", WIDTH_CASES, ids=[f"{c.id}-width{w}" for c, w in WIDTH_CASES])
def test_matches_pytorch_with_every_vector_width(case, width):
    """Widths past 16 bytes are read and written in several 16-byte accesses."""
    check(case, {"vector_width": width, "vectors_per_thread": 2, "threads": 32})


STEP_CASES = [silu_up((9, 1000), F32), transposed_store((9, 2000), BF16), rope(8, 40, 64, BF16)]


@pytest.mark.parametrize("case", STEP_CASES, ids=[c.id for c in STEP_CASES])
def test_threads_that_take_several_steps_match_pytorch(case):
    knobs = {"threads": 32, "vectors_per_thread": 2, "steps": 3}
    kernel = check(case, knobs)
    tile = SCHEDULE.schedule(case.kernel, SM_90, knobs)
    assert kernel.launch.grid[0] == tile.grid_shape()["x"]
    assert dict(tile.knobs)["steps"] == 3


def test_chosen_decisions_on_a_large_tensor_match_pytorch():
    """By default a thread takes one vector in one step, and the grid covers the tensor."""
    case = silu_up((64, 520), F32)
    tile = SCHEDULE.schedule(case.kernel, SM_90, {})
    knobs = dict(tile.knobs)
    assert (tile.vector_width, knobs["vectors_per_thread"], knobs["steps"]) == (4, 1, 1)
    assert tile.grid_shape()["x"] * tile.grid[0].threads * 4 >= 64 * 520
    check(case, {})

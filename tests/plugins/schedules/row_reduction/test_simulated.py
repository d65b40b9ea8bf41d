"""Row reductions run by the Kernel IR simulator against eager PyTorch in float64.

Every run raises on a race, an access out of bounds or a read of unwritten shared
memory, so passing is also "zero faults". Row lengths are not multiples of 32 or of the
thread count; row counts are odd and not multiples of the rows per block.
"""

import pytest
import torch

from lamina.bench.measure import float64_reference, relative_error

from .programs import PROGRAMS, run

SHAPES = [(5, 1), (7, 33), (3, 300)]

KNOBS = {
    "warp_per_row": ({"threads": 32, "rows_per_block": 1}, (5, 100)),
    "four_warps_four_rows": ({"threads": 32, "rows_per_block": 4}, (5, 100)),
    "block_of_64": ({"threads": 64}, (3, 300)),
    "two_rows_of_128": ({"threads": 128, "rows_per_block": 2}, (3, 300)),
    "block_of_256_short_row": ({"threads": 256}, (3, 100)),
    "warp_rereading_the_row": ({"threads": 32, "rows_per_block": 2, "row_in_registers": False}, (5, 100)),
    "block_rereading_the_row": ({"threads": 128, "row_in_registers": False}, (3, 300)),
}


def tolerance(program):
    return 1e-2 if program.dtype == torch.bfloat16 else 1e-5


def check(program, rows, length, knobs):
    compilation, inputs, got = run(program, rows, length, schedule="row_reduction", knobs=knobs)
    expected = float64_reference(program.fn, inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert "row_reduction" in [t.schedule for t in compilation.tiles]
    for out, want in zip(got, expected, strict=True):
        assert out.dtype == program.dtype
        assert relative_error(out, want) < tolerance(program)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("program", PROGRAMS, ids=[p.id for p in PROGRAMS])
def test_default_decisions_match_pytorch(program, shape):
    check(program, *shape, knobs={})


@pytest.mark.parametrize("setting", KNOBS.values(), ids=list(KNOBS))
@pytest.mark.parametrize("program", PROGRAMS, ids=[p.id for p in PROGRAMS])
def test_pinned_decisions_match_pytorch(program, setting):
    knobs, shape = setting
    check(program, *shape, knobs=knobs)

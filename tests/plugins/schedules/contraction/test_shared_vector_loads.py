"""Vector loads from shared memory, as the contraction's inner loop reads its fragments: what the
verifier accepts, their CUDA, and the simulator's values, bank conflicts and misalignment faults."""

import pytest
import torch

from lamina.backends.cuda import assert_no_spills, compile_kernel, emit_cuda
from lamina.backends.reference.simulator import simulate
from lamina.core.errors import VerificationError
from lamina.core.ir import dtypes, expr as ex, kernel_ir as kir

F32 = dtypes.float32
TX = kir.thread_idx("x")
ZERO = ex.const(0)
ROW = 36
"""A staged tile's row: 32 elements and a padding of 4, so that every row starts 16-byte aligned."""


def staged_read_kernel(column, row_length=ROW, threads=32, width=4):
    """Thread ``t`` stages ``x`` (2 rows) in shared memory, then reads ``width`` elements of row 1 from
    ``column`` with one vector load and writes them to ``y[4t..4t+3]``."""
    fill = []
    for row in range(2):
        for half in range(2):
            element = TX + half * threads
            fill.append(kir.If(ex.op("lt", element, row_length),
                               (kir.Store("tile", (ex.const(row), element),
                                          kir.Load("x", (element + row * row_length,), F32)),)))
    out = [kir.Store("y", (TX * 4 + i,), kir.Load("r", (ex.const(i),), F32)) for i in range(4)]
    return kir.Kernel(
        "staged_read",
        params=(kir.Param("x", F32, 2 * row_length), kir.Param("y", F32, 4 * threads, writable=True)),
        arrays=(kir.Array("tile", F32, (2, row_length), "shared"), kir.Array("r", F32, (4,), "register")),
        body=(*fill, kir.Barrier(), kir.VectorLoad("r", (ZERO,), "tile", (ex.const(1), column), width), *out),
        launch=kir.Launch((1, 1, 1), (threads, 1, 1)),
    )


def run(kernel, row_length=ROW):
    x = torch.randn(2 * row_length)
    y = torch.zeros(kernel.params[1].numel)
    report = simulate(kernel, {"x": x, "y": y}, raise_on_fault=False)
    return x, y, report


def test_a_warp_reading_consecutive_vectors_gets_the_values_without_bank_conflicts():
    kernel = staged_read_kernel(TX % 8 * 4)
    x, y, report = run(kernel)
    expected = torch.stack([x[ROW + t % 8 * 4: ROW + t % 8 * 4 + 4] for t in range(32)]).reshape(-1)
    assert torch.equal(y, expected)
    assert report.faults == [] and report.total_bank_conflicts == 0


def test_vectors_spread_over_two_phases_worth_of_banks_conflict():
    """Eight lanes reading every other 16-byte vector span 256 bytes: two wavefronts in each of
    the warp's four phases."""
    _, _, report = run(staged_read_kernel(TX % 8 * 8, row_length=68), row_length=68)
    assert report.faults == []
    assert report.bank_conflicts["tile"] == 4


def test_a_misaligned_shared_vector_load_is_reported_and_not_made():
    _, y, report = run(staged_read_kernel(TX % 8 * 4 + 2))
    (message,) = report.misaligned
    assert "vector load of 16 B from tile[1][2] in block (0, 0, 0) at byte 152 of the array is not " \
           "16-byte aligned, by thread (0, 0, 0)" in message
    assert torch.count_nonzero(y) == 0


def test_a_shared_vector_load_past_the_row_is_out_of_bounds():
    _, _, report = run(staged_read_kernel(TX * 0 + 34))
    (message,) = report.out_of_bounds
    assert "vector load from tile at [1][34] (4 elements), outside [2][36]" in message


def test_the_shared_array_is_aligned_in_cuda_and_read_as_uint4():
    kernel = staged_read_kernel(TX % 8 * 4)
    source = emit_cuda(kernel)
    assert "__shared__ __align__(16) float tile[2][36];" in source
    assert ("*reinterpret_cast<uint4*>(&r[0]) = *reinterpret_cast<const uint4*>(&tile[1][(int)threadIdx.x % 8 * 4]);"
            in source)
    assert "__align__(16) float r[4];" in source
    assert_no_spills(compile_kernel(source, "staged_read", "sm_90"))


@pytest.mark.parametrize("statement,problem", [
    (kir.VectorLoad("r", (ZERO,), "tile", (ZERO,), 4), "vector load of tile with 1 indices; it has rank 2"),
    (kir.VectorLoad("r", (ZERO,), "odd", (ZERO, ZERO), 4),
     "vector load through odd: its rows of 34 elements are not a whole number of 4-element vectors"),
    (kir.VectorLoad("r", (ZERO,), "tile", (ZERO, ex.const(6)), 4), "vector load at element 6 of tile is not aligned"),
    (kir.VectorStore("tile", (ZERO,), "r", (ZERO,), 4), "vector store of tile with 1 indices; it has rank 2"),
    (kir.VectorStore("r", (ZERO,), "r", (ZERO,), 4), "vector store of r: it is not a global parameter or a shared"),
])
def test_the_verifier_checks_shared_vector_loads(statement, problem):
    kernel = kir.Kernel(
        "bad", params=(),
        arrays=(kir.Array("tile", F32, (2, 36), "shared"), kir.Array("odd", F32, (2, 34), "shared"),
                kir.Array("r", F32, (4,), "register")),
        body=(statement,), launch=kir.Launch((1, 1, 1), (32, 1, 1)),
    )
    with pytest.raises(VerificationError, match=problem):
        kir.verify_kernel(kernel)

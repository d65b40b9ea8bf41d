"""cp.async in the Kernel IR simulator: groups, waits, predicates, and the faults of misuse."""

from __future__ import annotations

import pytest
import torch

from lamina.backends.reference.simulator import simulate
from lamina.core.ir import dtypes, kernel_ir as kir
from lamina.core.ir.expr import Var, const, op

F32 = dtypes.float32
TX, BX = kir.thread_idx("x"), kir.block_idx("x")
WIDTH = 64
ROWS_PER_BLOCK = 6


def reversed_rows(rows: int, wait: bool = True, first_barrier: bool = True, last_barrier: bool = True) -> kir.Kernel:
    """``y[r] = x[r].flip()``: each block streams ROWS_PER_BLOCK rows of 64 floats through two
    shared buffers, copying row ``it + 1`` with cp.async while it reverses row ``it``."""
    it = Var("it")
    row = BX * ROWS_PER_BLOCK + it

    def fetch(step):
        r = BX * ROWS_PER_BLOCK + step
        return kir.CpAsync("stage", (step % 2, TX), "x", (r * WIDTH + TX,), 4, op("lt", r, rows))

    loop = [
        kir.If(op("lt", it + 1, ROWS_PER_BLOCK), [fetch(it + 1)]),
        kir.CpAsyncCommit(),
        *([kir.CpAsyncWait(1)] if wait else []),
        *([kir.Barrier()] if first_barrier else []),
        kir.If(op("lt", row, rows), [
            kir.Store("y", (row * WIDTH + TX,), kir.Load("stage", (it % 2, WIDTH - 1 - TX), F32)),
        ]),
        *([kir.Barrier()] if last_barrier else []),
    ]
    return kir.Kernel(
        name="reversed_rows",
        params=[kir.Param("x", F32, rows * WIDTH), kir.Param("y", F32, rows * WIDTH, writable=True)],
        arrays=[kir.Array("stage", F32, (2, WIDTH), "shared")],
        body=[fetch(const(0)), kir.CpAsyncCommit(), kir.For("it", const(0), const(ROWS_PER_BLOCK), 1, loop)],
        launch=kir.Launch((-(-rows // ROWS_PER_BLOCK), 1, 1), (WIDTH, 1, 1)),
    )


def run(kernel: kir.Kernel, n: int):
    x, y = torch.randn(n), torch.full((n,), float("nan"))
    report = simulate(kernel, {"x": x, "y": y}, raise_on_fault=False)
    return x, y, report


@pytest.mark.parametrize("rows", [12, 17])
def test_double_buffered_copies_give_torch_numbers_without_faults(rows):
    x, y, report = run(reversed_rows(rows), rows * WIDTH)
    assert report.faults == []
    assert torch.equal(y.view(rows, WIDTH), x.view(rows, WIDTH).flip(1))
    assert report.bank_conflicts == {"stage": 0}


def test_reading_before_the_wait_is_a_fault():
    _, _, report = run(reversed_rows(12, wait=False), 12 * WIDTH)
    assert len(report.races) == 2
    assert report.races[0].startswith(
        "kernel reversed_rows: read of cp.async data before its wait: stage[0][63] in block (0, 0, 0) "
        "read by thread (0, 0, 0), copied by thread (63, 0, 0)")
    # Never waited for, the copies are still in flight when the buffer is filled again.
    assert "written by cp.async by thread (0, 0, 0) while a cp.async by thread (0, 0, 0) into it is still in flight" \
        in report.races[1]


def test_reading_after_the_wait_but_before_a_barrier_is_a_race():
    _, _, report = run(reversed_rows(12, first_barrier=False), 12 * WIDTH)
    assert len(report.races) == 1
    assert report.races[0].startswith(
        "kernel reversed_rows: write-read race on shared memory stage[0][63] in block (0, 0, 0): "
        "written by thread (63, 0, 0) and then read by thread (0, 0, 0) with no barrier between")


def test_refilling_a_buffer_before_everyone_read_it_is_a_race():
    _, _, report = run(reversed_rows(12, last_barrier=False), 12 * WIDTH)
    assert len(report.races) == 1
    assert "read-write race on shared memory stage[0][" in report.races[0]
    assert "written by cp.async by thread" in report.races[0]


def single_copy(n: int, predicate, source_offset, *, commit: bool = True, pending: int = 0,
                width_bytes: int = 4) -> kir.Kernel:
    """One block of 16 threads; each copies ``width_bytes`` into ``s`` and writes back what it reads."""
    per_thread = width_bytes // 4
    body = [kir.CpAsync("s", (TX * per_thread,), "x", (source_offset,), width_bytes, predicate)]
    if commit:
        body.append(kir.CpAsyncCommit())
    body += [kir.CpAsyncWait(pending), kir.Barrier()]
    body += [kir.Store("y", (TX * per_thread + lane,), kir.Load("s", (TX * per_thread + lane,), F32))
             for lane in range(per_thread)]
    return kir.Kernel(
        name="single_copy",
        params=[kir.Param("x", F32, n), kir.Param("y", F32, 16 * per_thread, writable=True)],
        arrays=[kir.Array("s", F32, (16 * per_thread,), "shared")],
        body=body,
        launch=kir.Launch((1, 1, 1), (16, 1, 1)),
    )


def test_false_predicate_writes_zeros_without_reading_the_source():
    # Odd threads' source is far out of bounds, but their predicate is false: no fault.
    odd = op("eq", TX % 2, 1)
    kernel = single_copy(16, op("not", odd), op("where", odd, TX + 1000, TX))
    x = torch.randn(16)
    y = torch.full((16,), float("nan"))
    report = simulate(kernel, {"x": x, "y": y})
    assert report.faults == []
    assert torch.equal(y[0::2], x[0::2])
    assert torch.equal(y[1::2], torch.zeros(8))


def test_source_out_of_bounds_is_a_fault_and_copies_zeros():
    kernel = single_copy(16, None, TX + 4)
    x, y = torch.randn(16), torch.full((16,), float("nan"))
    report = simulate(kernel, {"x": x, "y": y}, raise_on_fault=False)
    assert report.out_of_bounds == [
        "kernel single_copy: cp.async from x at offset 16, outside [0, 16), by block (0, 0, 0) thread (12, 0, 0); "
        "4 such accesses at this site"]
    assert torch.equal(y[:12], x[4:]) and torch.equal(y[12:], torch.zeros(4))


def test_sixteen_byte_copies_move_four_floats_per_thread():
    kernel = single_copy(64, None, TX * 4, width_bytes=16)
    x, y = torch.randn(64), torch.zeros(64)
    report = simulate(kernel, {"x": x, "y": y})
    assert report.faults == []
    assert torch.equal(y, x)
    # The copies are served a quarter warp (128 bytes) at a time: no conflict. Each of the four
    # scalar reads of s[tx * 4 + lane] puts threads t and t + 8 in one bank: one conflict each.
    assert report.bank_conflicts == {"s": 4}


def test_misaligned_sixteen_byte_copy_is_a_fault():
    kernel = single_copy(80, None, TX * 4 + 1, width_bytes=16)
    report = simulate(kernel, {"x": torch.randn(80), "y": torch.zeros(64)}, raise_on_fault=False)
    assert report.misaligned == [
        "kernel single_copy: cp.async of 16 B from x at byte 4 is not 16-byte aligned, by block (0, 0, 0) "
        "thread (0, 0, 0); 16 such accesses at this site"]
    assert report.out_of_bounds == []


def test_no_wait_completes_copies_that_were_never_committed():
    committed = simulate(single_copy(16, None, TX, commit=True, pending=0),
                         {"x": torch.randn(16), "y": torch.zeros(16)}, raise_on_fault=False)
    assert committed.faults == []
    uncommitted = simulate(single_copy(16, None, TX, commit=False, pending=0),
                           {"x": torch.randn(16), "y": torch.zeros(16)}, raise_on_fault=False)
    assert len(uncommitted.races) == 1 and "before its wait" in uncommitted.races[0]


def test_wait_keeps_the_most_recent_groups_in_flight():
    def kernel(pending):
        return kir.Kernel(
            name="two_groups",
            params=[kir.Param("x", F32, 64), kir.Param("y", F32, 64, writable=True)],
            arrays=[kir.Array("s", F32, (2, 32), "shared")],
            body=[
                kir.CpAsync("s", (const(0), TX), "x", (TX,)), kir.CpAsyncCommit(),
                kir.CpAsync("s", (const(1), TX), "x", (TX + 32,)), kir.CpAsyncCommit(),
                kir.CpAsyncWait(pending),
                kir.Store("y", (TX,), kir.Load("s", (const(0), TX), F32)),
                kir.Store("y", (TX + 32,), kir.Load("s", (const(1), TX), F32)),
            ],
            launch=kir.Launch((1, 1, 1), (32, 1, 1)),
        )

    x, y = torch.randn(64), torch.zeros(64)
    assert simulate(kernel(0), {"x": x, "y": y}).faults == []
    assert torch.equal(y, x)
    report = simulate(kernel(1), {"x": x, "y": y}, raise_on_fault=False)
    assert len(report.races) == 1
    assert report.races[0].startswith("kernel two_groups: read of cp.async data before its wait: s[1][0]")

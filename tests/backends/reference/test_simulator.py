"""The Kernel IR simulator on hand-written shared-memory kernels: numbers, races, bounds, bank conflicts."""

from __future__ import annotations

import time

import pytest
import torch

from lamina.backends.reference.simulator import simulate
from lamina.core.errors import SimulationError
from lamina.core.ir import dtypes, expr as ex, kernel_ir as kir
from lamina.core.ir.expr import Var, const, op

F32 = dtypes.float32
TX, TY = kir.thread_idx("x"), kir.thread_idx("y")
BX, BY = kir.block_idx("x"), kir.block_idx("y")


def transpose(rows: int, cols: int, padding: int = 1, barrier: bool = True, row_limit: int | None = None) -> kir.Kernel:
    """``y = x.T`` for x (rows, cols) through a 32x32 shared tile; 32x8 threads, four rows each."""
    row_limit = rows if row_limit is None else row_limit
    j = Var("j")
    r, c = BY * 32 + TY + j, BX * 32 + TX
    out_r, out_c = BX * 32 + TY + j, BY * 32 + TX
    stage = kir.For("j", const(0), const(32), 8, [
        kir.If(op("and", op("lt", r, rows), op("lt", c, cols)), [
            kir.Store("tile", (TY + j, TX), kir.Load("x", (r * cols + c,), F32)),
        ]),
    ])
    write = kir.For("j", const(0), const(32), 8, [
        kir.If(op("and", op("lt", out_r, cols), op("lt", out_c, row_limit)), [
            kir.Store("y", (out_r * rows + out_c,), kir.Load("tile", (TX, TY + j), F32)),
        ]),
    ])
    return kir.Kernel(
        name="transpose",
        params=[kir.Param("x", F32, rows * cols), kir.Param("y", F32, rows * cols, writable=True)],
        arrays=[kir.Array("tile", F32, (32, 32 + padding), "shared")],
        body=[stage, kir.Barrier(), write] if barrier else [stage, write],
        launch=kir.Launch((-(-cols // 32), -(-rows // 32), 1), (32, 8, 1)),
    )


def block_sum(n: int, threads: int = 128, barriers: bool = True) -> kir.Kernel:
    """``out[b] = sum(x[b*threads : (b+1)*threads])`` by a tree in shared memory."""
    i = Var("i")
    body = [
        kir.Declare("i", dtypes.index, BX * threads + TX),
        kir.Store("part", (TX,), op("where", op("lt", i, n), kir.Load("x", (i,), F32), 0.0)),
    ]
    stride = threads // 2
    while stride:
        if barriers:
            body.append(kir.Barrier())
        body.append(kir.If(op("lt", TX, stride), [
            kir.Store("part", (TX,), op("add", kir.Load("part", (TX,), F32), kir.Load("part", (TX + stride,), F32))),
        ]))
        stride //= 2
    body.append(kir.If(op("eq", TX, 0), [kir.Store("out", (BX,), kir.Load("part", (const(0),), F32))]))
    blocks = -(-n // threads)
    return kir.Kernel(
        name="block_sum",
        params=[kir.Param("x", F32, n), kir.Param("out", F32, blocks, writable=True)],
        arrays=[kir.Array("part", F32, (threads,), "shared")],
        body=body,
        launch=kir.Launch((blocks, 1, 1), (threads, 1, 1)),
    )


def column_read(padding: int, warps: int = 1) -> kir.Kernel:
    """Each thread fills row ``tx`` of a 32-wide tile, then reads down column 0 at row ``tx``."""
    k = Var("k")
    body = [
        kir.For("k", const(0), const(32), 1, [kir.Store("tile", (TX, k), ex.cast(TX * 32 + k, F32))]),
        kir.Barrier(),
        kir.Store("y", (TX,), kir.Load("tile", (TX % 32, const(0)), F32)),
    ]
    threads = 32 * warps
    return kir.Kernel(
        name="column_read",
        params=[kir.Param("y", F32, threads, writable=True)],
        arrays=[kir.Array("tile", F32, (threads, 32 + padding), "shared")],
        body=body,
        launch=kir.Launch((1, 1, 1), (threads, 1, 1)),
    )


def run_transpose(rows, cols, **options):
    kernel = transpose(rows, cols, **options)
    x = torch.randn(rows * cols)
    y = torch.full((rows * cols,), float("nan"))
    report = simulate(kernel, {"x": x, "y": y}, raise_on_fault=False)
    return x.view(rows, cols), y.view(cols, rows), report


@pytest.mark.parametrize("rows, cols", [(64, 96), (70, 45), (1, 33)])
def test_tiled_transpose_matches_torch_without_faults(rows, cols):
    x, y, report = run_transpose(rows, cols)
    assert report.faults == []
    assert torch.equal(y, x.T)
    assert report.bank_conflicts == {"tile": 0}


def test_block_sum_matches_torch_without_faults():
    n = 1000
    kernel = block_sum(n)
    x = torch.randn(n)
    out = torch.zeros(kernel.params[1].numel)
    report = simulate(kernel, {"x": x, "out": out})
    assert report.faults == []
    expected = torch.nn.functional.pad(x, (0, 1024 - n)).view(8, 128).sum(1)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_transpose_without_barrier_reports_the_race():
    _, _, report = run_transpose(64, 64, barrier=False)
    assert len(report.races) == 1
    message = report.races[0]
    assert "write-read race on shared memory tile[" in message
    assert "thread (" in message and "no barrier between" in message
    assert report.out_of_bounds == [] and report.unwritten_reads == []
    with pytest.raises(SimulationError, match="write-read race"):
        report.raise_for_faults()


def test_tree_sum_without_barriers_reports_races():
    kernel = block_sum(256, barriers=False)
    report = simulate(kernel, {"x": torch.randn(256), "out": torch.zeros(2)}, raise_on_fault=False)
    kinds = " ".join(report.races)
    assert "write-read race on shared memory part[" in kinds


def test_racing_writes_to_one_element_are_a_write_write_race():
    kernel = kir.Kernel(
        name="pile_up", params=[kir.Param("y", F32, 1, writable=True)],
        arrays=[kir.Array("cell", F32, (1,), "shared")],
        body=[kir.Store("cell", (const(0),), ex.cast(TX, F32)), kir.Barrier(),
              kir.If(op("eq", TX, 0), [kir.Store("y", (const(0),), kir.Load("cell", (const(0),), F32))])],
        launch=kir.Launch((1, 1, 1), (64, 1, 1)),
    )
    report = simulate(kernel, {"y": torch.zeros(1)}, raise_on_fault=False)
    assert len(report.races) == 1
    assert report.races[0].startswith("kernel pile_up: write-write race on shared memory cell[0] in block (0, 0, 0)")
    assert "64 such accesses at this site" in report.races[0]


def test_off_by_one_index_is_out_of_bounds():
    rows, cols = 40, 40
    x, y, report = run_transpose(rows, cols, row_limit=rows + 1)
    assert len(report.out_of_bounds) == 1
    assert report.out_of_bounds[0].startswith(f"kernel transpose: store to y at offset {rows * cols}, "
                                              f"outside [0, {rows * cols}), by block (1, 1, 0) thread (8, 7, 0)")
    assert "read of unwritten shared memory tile[8][" in report.unwritten_reads[0]
    kernel = transpose(rows, cols, row_limit=rows + 1)
    with pytest.raises(SimulationError, match="outside"):
        simulate(kernel, {"x": torch.randn(rows * cols), "y": torch.zeros(rows * cols)})


def test_out_of_bounds_load_is_masked_to_zero_and_counted():
    n = 100
    i = Var("i")
    kernel = kir.Kernel(
        name="shifted_copy", params=[kir.Param("x", F32, n), kir.Param("y", F32, n, writable=True)], arrays=[],
        body=[kir.Declare("i", dtypes.index, BX * 32 + TX),
              kir.If(op("lt", i, n), [kir.Store("y", (i,), kir.Load("x", (i + 3,), F32))])],
        launch=kir.Launch((4, 1, 1), (32, 1, 1)),
    )
    x, y = torch.randn(n), torch.zeros(n)
    report = simulate(kernel, {"x": x, "y": y}, raise_on_fault=False)
    assert report.out_of_bounds == [
        "kernel shifted_copy: load from x at offset 100, outside [0, 100), by block (3, 0, 0) thread (1, 0, 0); "
        "3 such accesses at this site"]
    assert torch.equal(y[:97], x[3:]) and torch.equal(y[97:], torch.zeros(3))


def test_shared_index_past_the_padded_shape_is_out_of_bounds():
    kernel = kir.Kernel(
        name="spill", params=[],
        arrays=[kir.Array("tile", F32, (4, 9), "shared")],
        body=[kir.Store("tile", (TX // 8, TX % 8 + 2), const(1.0))],
        launch=kir.Launch((1, 1, 1), (32, 1, 1)),
    )
    report = simulate(kernel, {}, raise_on_fault=False)
    assert report.out_of_bounds == [
        "kernel spill: store to tile at [0][9], outside [4][9], by block (0, 0, 0) thread (7, 0, 0); "
        "4 such accesses at this site"]


def test_unpadded_column_read_conflicts_and_padded_does_not():
    for warps in (1, 2):
        y = torch.zeros(32 * warps)
        unpadded = simulate(column_read(padding=0, warps=warps), {"y": y})
        assert torch.equal(y, torch.arange(32 * warps, dtype=torch.float32) % 32 * 32)
        # 32 lanes read 32 words of bank 0: 32 wavefronts, 31 conflicts per warp; the row stores
        # (one word per lane, all in the same bank, at each k) conflict just as much.
        assert unpadded.bank_conflicts == {"tile": 31 * warps * 33}
        padded = simulate(column_read(padding=1, warps=warps), {"y": y})
        assert padded.bank_conflicts == {"tile": 0}
        assert padded.faults == [] and unpadded.faults == []


def test_lanes_reading_one_word_share_it():
    kernel = kir.Kernel(
        name="broadcast", params=[kir.Param("y", F32, 64, writable=True)],
        arrays=[kir.Array("s", F32, (64,), "shared")],
        body=[kir.Store("s", (TX,), const(2.0)), kir.Barrier(),
              kir.Store("y", (TX,), kir.Load("s", (TX // 16,), F32))],
        launch=kir.Launch((1, 1, 1), (64, 1, 1)),
    )
    # Lanes 0-15 read word 0 and lanes 16-31 word 1: two banks, one wavefront.
    assert simulate(kernel, {"y": torch.zeros(64)}).total_bank_conflicts == 0


def test_unwritten_shared_read_is_a_fault():
    kernel = kir.Kernel(
        name="half_filled", params=[kir.Param("y", F32, 64, writable=True)],
        arrays=[kir.Array("s", F32, (2, 64), "shared")],
        body=[kir.If(op("lt", TX, 32), [kir.Store("s", (const(1), TX), const(1.0))]), kir.Barrier(),
              kir.Store("y", (TX,), kir.Load("s", (const(1), 63 - TX), F32))],
        launch=kir.Launch((1, 1, 1), (64, 1, 1)),
    )
    report = simulate(kernel, {"y": torch.zeros(64)}, raise_on_fault=False)
    assert report.unwritten_reads == [
        "kernel half_filled: read of unwritten shared memory s[1][63] in block (0, 0, 0) by thread (0, 0, 0); "
        "32 such accesses at this site"]
    assert report.races == []


def test_barrier_in_divergent_code_is_a_fault():
    kernel = kir.Kernel(
        name="split_barrier", params=[], arrays=[kir.Array("s", F32, (64,), "shared")],
        body=[kir.If(op("lt", TX, 40), [kir.Barrier()])],
        launch=kir.Launch((2, 1, 1), (64, 1, 1)),
    )
    report = simulate(kernel, {}, raise_on_fault=False)
    assert report.races == ["kernel split_barrier: barrier reached by 40 of 64 threads of block (0, 0, 0): "
                            "every thread of a block must reach each barrier; 2 such accesses at this site"]


def test_a_grid_of_64_blocks_of_256_threads_runs_a_64_step_loop_quickly():
    """A shared-memory matmul, 16x16 tiles: 64 iterations of 36 statements over 16384 threads."""
    m = n = 128
    k = 1024
    tile = 16
    step = Var("k")
    row, col = BY * tile + TY, BX * tile + TX
    products = [
        kir.Assign("acc", op("add", Var("acc", F32),
                             op("mul", kir.Load("As", (TY, const(kk)), F32), kir.Load("Bs", (const(kk), TX), F32))))
        for kk in range(tile)
    ]
    body = [
        kir.Declare("acc", F32, const(0.0)),
        kir.For("k", const(0), const(k // tile), 1, [
            kir.Store("As", (TY, TX), kir.Load("a", (row * k + step * tile + TX,), F32)),
            kir.Store("Bs", (TY, TX), kir.Load("b", ((step * tile + TY) * n + col,), F32)),
            kir.Barrier(),
            *products,
            kir.Barrier(),
        ]),
        kir.Store("c", (row * n + col,), Var("acc", F32)),
    ]
    kernel = kir.Kernel(
        name="matmul",
        params=[kir.Param("a", F32, m * k), kir.Param("b", F32, k * n), kir.Param("c", F32, m * n, writable=True)],
        arrays=[kir.Array("As", F32, (tile, tile + 1), "shared"), kir.Array("Bs", F32, (tile, tile + 1), "shared")],
        body=body,
        launch=kir.Launch((n // tile, m // tile, 1), (tile, tile, 1)),
    )
    a, b, c = torch.randn(m * k), torch.randn(k * n), torch.zeros(m * n)
    start = time.perf_counter()
    report = simulate(kernel, {"a": a, "b": b, "c": c})
    elapsed = time.perf_counter() - start
    assert report.faults == []
    expected = a.view(m, k).double() @ b.view(k, n).double()
    torch.testing.assert_close(c.view(m, n).double(), expected, rtol=1e-4, atol=1e-3)
    assert elapsed < 10, f"simulation took {elapsed:.1f} s"

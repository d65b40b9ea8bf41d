"""Control flow, registers and thread indices in the Kernel IR simulator."""

from __future__ import annotations

import pytest
import torch

from lamina.backends.reference.simulator import simulate
from lamina.core.errors import SimulationError, VerificationError
from lamina.core.ir import dtypes, expr as ex, kernel_ir as kir
from lamina.core.ir.expr import Var, const, op

F32 = dtypes.float32
I64 = dtypes.int64
TX, BX = kir.thread_idx("x"), kir.block_idx("x")


def one_per_thread(name: str, n: int, body, arrays=(), block: int = 64, extra_params=()) -> kir.Kernel:
    """A kernel over x[n] -> y[n] with ``i`` declared as the thread's global index."""
    return kir.Kernel(
        name=name,
        params=[kir.Param("x", F32, n), kir.Param("y", F32, n, writable=True), *extra_params],
        arrays=list(arrays),
        body=[kir.Declare("i", I64, BX * block + TX), *body],
        launch=kir.Launch((-(-n // block), 1, 1), (block, 1, 1)),
    )


def run(kernel: kir.Kernel, n: int, **options):
    x, y = torch.randn(n), torch.full((n,), float("nan"))
    report = simulate(kernel, {"x": x, "y": y}, **options)
    return x, y, report


def test_if_else_runs_each_branch_under_its_mask():
    n = 150
    i, v = Var("i"), Var("v", F32)
    body = [
        kir.Declare("v", F32, op("where", op("lt", i, n), kir.Load("x", (i,), F32), 0.0)),
        kir.If(op("gt", v, 0.0), [
            kir.Assign("v", op("mul", v, 2.0)),
            kir.If(op("gt", v, 1.0), [kir.Assign("v", op("add", v, 100.0))]),
        ], [
            kir.Assign("v", op("neg", v)),
        ]),
        kir.If(op("lt", i, n), [kir.Store("y", (i,), v)]),
    ]
    x, y, report = run(one_per_thread("branches", n, body), n)
    doubled = x * 2
    expected = torch.where(x > 0, torch.where(doubled > 1, doubled + 100, doubled), -x)
    assert torch.equal(y, expected)
    assert report.faults == []


def test_register_arrays_take_uniform_and_per_thread_indices():
    n = 96
    i, k = Var("i"), Var("k")
    body = [
        kir.If(op("lt", i, n), [
            kir.For("k", const(0), const(4), 1, [
                kir.Store("r", (k,), op("mul", kir.Load("x", (i,), F32), ex.cast(k + 1, F32))),
            ], unroll=True),
            kir.Store("y", (i,), op("add", kir.Load("r", (TX % 4,), F32), kir.Load("r", (const(3),), F32))),
        ]),
    ]
    kernel = one_per_thread("registers", n, body, arrays=[kir.Array("r", F32, (4,), "register")])
    x, y, report = run(kernel, n)
    expected = x * (torch.arange(n) % 64 % 4 + 1) + x * 4
    assert torch.equal(y, expected)
    assert report.faults == []


def test_register_index_out_of_bounds_is_a_fault():
    n = 64
    body = [kir.Store("r", (TX % 5,), const(1.0)), kir.Store("y", (Var("i"),), kir.Load("r", (TX % 4,), F32))]
    kernel = one_per_thread("registers", n, body, arrays=[kir.Array("r", F32, (4,), "register")])
    _, _, report = run(kernel, n, raise_on_fault=False)
    assert report.out_of_bounds == [
        "kernel registers: store to register array r at [4], outside [4], by block (0, 0, 0) thread (4, 0, 0); "
        "12 such accesses at this site"]


def test_loop_bounds_that_differ_between_threads_are_an_error():
    k = Var("k")
    body = [kir.For("k", const(0), TX, 1, [kir.Store("y", (Var("i"),), ex.cast(k, F32))])]
    with pytest.raises(SimulationError, match="loop bounds must be uniform"):
        run(one_per_thread("ragged", 64, body), 64)


def test_loop_bounds_need_only_agree_among_running_threads():
    k, total = Var("k"), Var("total", F32)
    body = [
        kir.Declare("total", F32, const(0.0)),
        kir.If(op("eq", TX, 5), [
            kir.For("k", const(0), TX, 1, [kir.Assign("total", op("add", total, kir.Load("x", (k,), F32)))]),
        ]),
        kir.Store("y", (Var("i"),), total),
    ]
    x, y, _ = run(one_per_thread("one_thread_loop", 64, body), 64)
    expected = torch.zeros(64)
    expected[5] = x[0] + x[1] + x[2] + x[3] + x[4]
    assert torch.equal(y, expected)


def test_loads_behind_where_and_and_are_evaluated_only_where_c_would():
    n = 70
    i = Var("i")
    guarded = op("and", op("lt", i, n), op("gt", kir.Load("x", (i,), F32), 0.0))
    body = [
        kir.If(guarded, [kir.Store("y", (i,), const(1.0))], [
            kir.If(op("lt", i, n), [kir.Store("y", (i,), op("where", op("ge", i, n), kir.Load("x", (i + 1000,), F32),
                                                              const(-1.0)))]),
        ]),
    ]
    x, y, report = run(one_per_thread("guarded", n, body), n)
    assert report.faults == []
    assert torch.equal(y, torch.where(x > 0, 1.0, -1.0))


def test_thread_and_block_indices_follow_the_launch_with_x_fastest():
    block, grid = (4, 2, 3), (2, 3, 2)
    tpb, blocks = 24, 12
    t = [kir.thread_idx(a) for a in "xyz"]
    b = [kir.block_idx(a) for a in "xyz"]
    flat = ((b[2] * grid[1] + b[1]) * grid[0] + b[0]) * tpb + (t[2] * block[1] + t[1]) * block[0] + t[0]
    code = t[0] + t[1] * 10 + t[2] * 100 + b[0] * 1000 + b[1] * 10000 + b[2] * 100000
    kernel = kir.Kernel(
        name="indices", params=[kir.Param("y", I64, tpb * blocks, writable=True)], arrays=[],
        body=[kir.Store("y", (flat,), code)], launch=kir.Launch(grid, block),
    )
    y = torch.full((tpb * blocks,), -1, dtype=torch.int64)
    simulate(kernel, {"y": y})
    expected = [tx + 10 * ty + 100 * tz + 1000 * bx + 10000 * by + 100000 * bz
                for bz in range(2) for by in range(3) for bx in range(2)
                for tz in range(3) for ty in range(2) for tx in range(4)]
    assert y.tolist() == expected


def test_float32_arithmetic_stays_float32():
    torch.manual_seed(0)  # inputs on which the fused and the unfused sums differ (checked below)
    n = 1000
    k, acc = Var("k"), Var("acc", F32)
    body = [
        kir.Declare("acc", F32, const(0.0)),
        kir.For("k", const(0), const(n), 1, [kir.Assign("acc", op("add", acc, op("mul", kir.Load("x", (k,), F32), 0.1)))]),
        kir.If(op("eq", Var("i"), 0), [kir.Store("y", (const(0),), acc)]),
    ]
    x, y, _ = run(one_per_thread("serial_sum", n, body, block=32), n)
    expected = torch.zeros((), dtype=torch.float32)
    tenth = torch.tensor(0.1, dtype=torch.float32)
    for value in x:  # one fused multiply-add a step, as NVRTC contracts it: rounded to float32 once
        expected = (expected.double() + value.double() * tenth.double()).float()
    assert y[0].item() == expected.item()
    unfused = torch.zeros((), dtype=torch.float32)
    for value in x:
        unfused = unfused + value * tenth
    assert y[0].item() != unfused.item()


def test_integer_division_by_zero_only_matters_in_running_threads():
    safe = one_per_thread("divide", 64, [
        kir.If(op("gt", TX, 0), [kir.Store("y", (Var("i"),), ex.cast(op("floordiv", const(100), TX), F32))]),
    ])
    _, y, _ = run(safe, 64)
    assert y[1:].tolist() == [100 // t for t in range(1, 64)]
    unsafe = one_per_thread("divide", 64, [kir.Store("y", (Var("i"),), ex.cast(op("floordiv", const(100), TX), F32))])
    with pytest.raises(SimulationError, match="division by zero .* by block \\(0, 0, 0\\) thread \\(0, 0, 0\\)"):
        run(unsafe, 64)


def test_a_declaration_in_a_branch_shadows_until_the_branch_ends():
    v = Var("v", F32)
    body = [
        kir.Declare("v", F32, const(1.0)),
        kir.If(op("lt", TX, 8), [kir.Declare("v", F32, const(5.0)), kir.Assign("v", op("add", v, 1.0))]),
        kir.Store("y", (Var("i"),), v),
    ]
    _, y, _ = run(one_per_thread("shadow", 64, body), 64)
    assert torch.equal(y, torch.ones(64))


def test_arrays_that_do_not_match_the_parameters_are_refused_all_at_once():
    kernel = one_per_thread("copy", 64, [kir.Store("y", (Var("i"),), kir.Load("x", (Var("i"),), F32))])
    with pytest.raises(SimulationError) as caught:
        simulate(kernel, {"x": torch.zeros(8, 8, dtype=torch.float64)})
    message = str(caught.value)
    assert "parameter x has shape (8, 8); it must be flat with 64 elements" in message
    assert "parameter x is torch.float64; the kernel declares float32" in message
    assert "parameter y has no tensor" in message


def test_inconsistent_kernels_are_verification_errors():
    undeclared = one_per_thread("typo", 64, [kir.Store("y", (Var("j"),), const(0.0))])
    with pytest.raises(VerificationError, match="variable j is used before it is declared"):
        run(undeclared, 64)
    to_input = one_per_thread("to_input", 64, [kir.Store("x", (Var("i"),), const(0.0))])
    with pytest.raises(VerificationError, match="store to input parameter x"):
        run(to_input, 64)

"""Atomic additions, grid-wide fences and cache hints in Kernel IR: simulated, printed, compiled."""

from __future__ import annotations

import pytest
import torch

from lamina.backends.cuda.codegen import emit_cuda, kernel_symbol
from lamina.backends.cuda.nvrtc import compile_kernel
from lamina.backends.reference.simulator import simulate
from lamina.core.errors import VerificationError
from lamina.core.ir import dtypes, expr as ex, kernel_ir as kir, loop_ir
from lamina.core.ir.expr import const, op
from lamina.runtime.program_runner import ProgramRunner

F32, I32 = dtypes.float32, dtypes.int32
TX, BX = kir.thread_idx("x"), kir.block_idx("x")
BLOCKS, THREADS = 5, 32


def last_block_sums(cache_hints: bool = True) -> kir.Kernel:
    """Each block stores its lanes' x * 2 in y, counts itself done, and the last block to finish
    writes the sum of all of y into total."""
    n = BLOCKS * THREADS
    i = ex.Var("i")
    done = kir.Load("done", (const(0),), I32)
    count = [kir.AtomicAdd("done", (const(0),), "counter", const(0), const(1, I32)),
             kir.Store("last", (const(0),), op("where", op("eq", done, const(BLOCKS - 1, I32)), const(1, I32),
                                               const(0, I32)))]
    add_up = [kir.Store("sum", (const(0),), const(0.0, F32)),
              kir.For("j", const(0), const(n // 4), 1, [
                  kir.VectorLoad("chunk", (const(0),), "y", (ex.Var("j") * 4,), 4,
                                 cache="l2" if cache_hints else "default"),
                  *[kir.Store("sum", (const(0),),
                              kir.Load("sum", (const(0),), F32) + kir.Load("chunk", (const(e),), F32))
                    for e in range(4)]]),
              kir.Store("total", (const(0),), kir.Load("sum", (const(0),), F32))]
    return kir.Kernel(
        name="last_block_sums",
        params=[kir.Param("x", F32, n), kir.Param("y", F32, n, writable=True),
                kir.Param("total", F32, 1, writable=True), kir.Param("counter", I32, 1, writable=True, scratch=True)],
        arrays=[kir.Array("done", I32, (1,), "register"), kir.Array("last", I32, (1,), "shared"),
                kir.Array("sum", F32, (1,), "register"), kir.Array("chunk", F32, (4,), "register")],
        body=[kir.Declare("i", dtypes.index, BX * THREADS + TX),
              kir.Store("y", (i,), kir.Load("x", (i,), F32) * 2.0),
              kir.ThreadFence(), kir.Barrier(), kir.If(op("eq", TX, 0), count), kir.Barrier(),
              kir.If(op("ne", kir.Load("last", (const(0),), I32), const(0, I32)),
                     [kir.ThreadFence(), kir.If(op("eq", TX, 0), add_up)])],
        launch=kir.Launch((BLOCKS, 1, 1), (THREADS, 1, 1)),
    )


def assert_is_the_sum_of_twice(total: torch.Tensor, x: torch.Tensor) -> None:
    """``total`` is the sum of ``x * 2`` within float32's rounding of a sum of these terms."""
    terms = x.double() * 2
    assert abs(total.double().item() - terms.sum().item()) <= 1e-5 * terms.abs().sum().item()


def test_the_last_block_to_count_itself_done_sees_every_block_s_stores():
    kernel = last_block_sums()
    x = torch.randn(BLOCKS * THREADS)
    arrays = {"x": x, "y": torch.full_like(x, float("nan")), "total": torch.zeros(1),
              "counter": torch.zeros(1, dtype=torch.int32)}
    report = simulate(kernel, arrays)
    assert (report.races, report.out_of_bounds, report.unwritten_reads) == ([], [], [])
    assert_is_the_sum_of_twice(arrays["total"], x)
    assert int(arrays["counter"][0]) == BLOCKS


def test_each_thread_gets_the_value_before_its_own_addition():
    kernel = kir.Kernel(
        name="tickets", params=[kir.Param("tickets", I32, 64, writable=True),
                                kir.Param("counter", I32, 1, writable=True, scratch=True)],
        arrays=[kir.Array("mine", I32, (1,), "register")],
        body=[kir.AtomicAdd("mine", (const(0),), "counter", const(0), const(1, I32)),
              kir.Store("tickets", (BX * 32 + TX,), kir.Load("mine", (const(0),), I32))],
        launch=kir.Launch((2, 1, 1), (32, 1, 1)))
    arrays = {"tickets": torch.full((64,), -1, dtype=torch.int32), "counter": torch.zeros(1, dtype=torch.int32)}
    simulate(kernel, arrays)
    assert sorted(arrays["tickets"].tolist()) == list(range(64))


def test_the_printed_kernel_names_the_scratch_counter_the_fences_and_the_hints():
    printed = kir.format_kernel(last_block_sums())
    assert "param scratch counter: i32[1]" in printed
    assert "fence global memory for the grid" in printed
    assert "done[0] = atomic add(counter[0], 1)" in printed
    assert "vector load x4 through L2 chunk[0] <- y[j * 4]" in printed


def test_the_cuda_source_uses_atomic_add_the_fence_and_ldcg_and_compiles():
    kernel = last_block_sums()
    source = emit_cuda(kernel)
    assert "atomicAdd(&" in source and "__threadfence();" in source and "__ldcg(" in source
    compile_kernel(source, kernel_symbol(kernel), "sm_90")


def test_an_evict_first_store_is_a_streaming_store():
    kernel = kir.Kernel(
        name="streamed", params=[kir.Param("x", F32, 128), kir.Param("y", F32, 128, writable=True)],
        arrays=[kir.Array("v", F32, (4,), "register")],
        body=[kir.VectorLoad("v", (const(0),), "x", (TX * 4,), 4),
              kir.VectorStore("y", (TX * 4,), "v", (const(0),), 4, cache="evict_first")],
        launch=kir.Launch((1, 1, 1), (32, 1, 1)))
    assert "__stcs(" in emit_cuda(kernel)
    x = torch.randn(128)
    arrays = {"x": x, "y": torch.zeros(128)}
    simulate(kernel, arrays)
    assert torch.equal(arrays["y"], x)


@pytest.mark.parametrize("change, problem", [
    (lambda k: k, None),
    (lambda k: kir.Kernel(k.name, [kir.Param("counter", I32, 1, scratch=True)], [], [], k.launch),
     "scratch parameter counter is not writable"),
    (lambda k: kir.Kernel(k.name, k.params, k.arrays, [kir.VectorStore("y", (const(0),), "chunk", (const(0),), 4,
                                                                          cache="l2")], k.launch),
     "cache hint 'l2'; it takes default, evict_first"),
    (lambda k: kir.Kernel(k.name, k.params, k.arrays, [kir.AtomicAdd("sum", (const(0),), "counter", const(0),
                                                                     const(1, I32))], k.launch),
     "both must be int32"),
    (lambda k: kir.Kernel(k.name, k.params, k.arrays, [kir.AtomicAdd("done", (const(0),), "x", const(0),
                                                                     const(1, I32))], k.launch),
     "atomic add to x: it must be a writable global parameter"),
], ids=["consistent", "read_only_scratch", "load_hint_on_a_store", "float_atomic", "atomic_on_an_input"])
def test_the_verifier_checks_atomics_scratch_parameters_and_hints(change, problem):
    kernel = change(last_block_sums())
    if problem is None:
        kir.verify_kernel(kernel)
        return
    with pytest.raises(VerificationError, match=problem):
        kir.verify_kernel(kernel)


def test_the_runner_gives_each_launch_a_zeroed_scratch_array():
    kernel = last_block_sums()
    n = BLOCKS * THREADS
    buffers = [loop_ir.Buffer(name, loop_ir.TensorType((size,), F32)) for name, size in (("x", n), ("y", n),
                                                                                      ("total", 1))]
    loop = loop_ir.Program(inputs=buffers[:1], outputs=buffers[1:], temporaries=(), kernels=())
    seen = []

    def launch(k, arrays, sizes):
        seen.append(arrays["counter"].clone())
        simulate(k, arrays)

    runner = ProgramRunner(loop, kir.Program([kernel]), launch, torch.device("cpu"))
    x = torch.randn(n)
    for _ in range(2):
        y, total = runner(x)
        assert_is_the_sum_of_twice(total, x)
    assert [int(c[0]) for c in seen] == [0, 0]

"""Hopper's warpgroup mma (``WgmmaTf32``) in the Kernel IR simulator: its numbers, the faults of
its asynchronous protocol, and the bank conflicts of swizzled arrays."""

from __future__ import annotations

import attrs
import pytest
import torch

from lamina.backends.reference import tf32
from lamina.backends.reference.simulator import simulate
from lamina.core.errors import SimulationError, VerificationError
from lamina.core.ir import dtypes, kernel_ir as kir
from lamina.core.ir.expr import Var, const, op
from tests.backends.wgmma_kernels import TX, buffers, operands, sixteen_bit_product_from_registers, warpgroup_product

F32 = dtypes.float32
FIRST = "wgmma m64n32k8 tf32 (acc[0]..acc[15]) += a_tile[group * 64 + 0..63][0..7] x b_tile[0..31][0..7]^T"
SECOND = "wgmma m64n32k8 tf32 (acc[0]..acc[15]) += a_tile[group * 64 + 0..63][8..15] x b_tile[0..31][8..15]^T"
"""The two wgmma of the default ``warpgroup_product``, as the fault messages quote them."""


def run(kernel: kir.Kernel, warpgroups: int = 2, n: int = 32, k: int = 16):
    a, b, c = operands(warpgroups, n, k)
    arrays = buffers(a, b, c)
    report = simulate(kernel, arrays, raise_on_fault=False)
    return a, b, c, arrays["d"].view(64 * warpgroups, n), report


def tf32_product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return tf32.truncated(a).double() @ tf32.truncated(b).double().T


def edited(kernel: kir.Kernel, edit) -> kir.Kernel:
    """``kernel`` with each top-level statement ``s`` replaced by the statements ``edit(s)``."""
    return attrs.evolve(kernel, body=[new for s in kernel.body for new in edit(s)])


def wgmma_steps(kernel: kir.Kernel) -> list[kir.WgmmaTf32]:
    return [s for s in kernel.body if isinstance(s, kir.WgmmaTf32)]


@pytest.mark.parametrize("k", [8, 16, 32])
@pytest.mark.parametrize("n", [8, 32, 128])
@pytest.mark.parametrize("warpgroups", [1, 2])
def test_each_warpgroup_adds_the_tf32_product_of_its_rows(warpgroups, n, k):
    kernel = warpgroup_product(warpgroups, n, k)
    kir.verify_kernel(kernel)
    a, b, c, d, report = run(kernel, warpgroups, n, k)
    assert report.faults == []
    torch.testing.assert_close(d.double(), tf32_product(a, b) + c.double(), rtol=1e-6, atol=1e-6)
    assert not torch.allclose(d.double(), a.double() @ b.double().T + c.double(), rtol=1e-6, atol=0)


@pytest.mark.parametrize("k", [8, 32])
@pytest.mark.parametrize("n", [8, 128])
@pytest.mark.parametrize("warpgroups", [1, 2])
def test_with_a_from_registers_each_warpgroup_adds_the_same_product(warpgroups, n, k):
    kernel = warpgroup_product(warpgroups, n, k, a_from_registers=True)
    kir.verify_kernel(kernel)
    a, b, c, d, report = run(kernel, warpgroups, n, k)
    assert report.faults == []
    torch.testing.assert_close(d.double(), tf32_product(a, b) + c.double(), rtol=1e-6, atol=1e-6)


def test_a_register_of_a_overwritten_before_the_wait_is_a_fault():
    *_, report = run(warpgroup_product(a_from_registers=True, overwrite_a=True))
    assert report.faults == report.async_protocol and len(report.faults) == 1
    assert report.async_protocol[0] == (
        "kernel wgmma: store to register a_values[0][0] by block (0, 0, 0) thread (0, 0, 0) while `wgmma m64n32k8 "
        "tf32 (acc[0]..acc[15]) += a_values[0][0..3] x b_tile[0..31][0..7]^T`, which uses it, is still pending: "
        "commit the wgmma (WgmmaCommit) and wait for its group (WgmmaWait) before touching its registers; 256 such "
        "accesses at this site")


def test_registers_of_a_written_without_a_wgmma_fence_are_a_fault():
    *_, report = run(warpgroup_product(a_from_registers=True, wgmma_fence=False))
    assert any("reads A from register a_values[0][0], which an ordinary statement accessed since the thread's last "
               "WgmmaFence" in fault for fault in report.async_protocol)


def test_a_from_anything_but_a_register_array_is_refused():
    kernel = warpgroup_product(a_from_registers=True)
    first = next(s for s in kernel.body if isinstance(s, kir.WgmmaTf32) and s.a_from == "registers")
    bad = attrs.evolve(first, a=(kir.Load("a_tile", (const(0), const(0)), F32),) * 4)
    with pytest.raises(VerificationError, match="each value of A must be an element of an f32 register array"):
        kir.verify_kernel(edited(kernel, lambda s: [bad] if s is first else [s]))


def test_a_read_from_anywhere_but_shared_memory_or_registers_is_refused():
    kernel = warpgroup_product()
    first = wgmma_steps(kernel)[0]
    bad = attrs.evolve(first, a_from="global")
    with pytest.raises(VerificationError, match="wgmma reads A from 'global'; it reads A from shared or registers"):
        kir.verify_kernel(edited(kernel, lambda s: [bad] if s is first else [s]))


def test_without_accumulate_the_first_wgmma_replaces_the_accumulators():
    a, b, c, d, report = run(warpgroup_product(accumulate=False))
    assert report.faults == []
    torch.testing.assert_close(d.double(), tf32_product(a, b), rtol=1e-6, atol=1e-6)


def test_a_warpgroup_that_does_not_run_the_wgmma_keeps_its_accumulators():
    a, b, c, d, report = run(warpgroup_product(running=128))
    assert report.faults == []
    torch.testing.assert_close(d[:64].double(), tf32_product(a[:64], b) + c[:64].double(), rtol=1e-6, atol=1e-6)
    assert torch.equal(d[64:], c[64:])


def test_every_block_has_its_own_warpgroups_and_tiles():
    kernel = warpgroup_product()
    a, b, c, d, report = run(attrs.evolve(kernel, launch=kir.Launch((3, 1, 1), kernel.launch.block)))
    assert report.faults == []
    torch.testing.assert_close(d.double(), tf32_product(a, b) + c.double(), rtol=1e-6, atol=1e-6)


def test_operands_stored_without_a_proxy_fence_are_a_fault():
    *_, report = run(warpgroup_product(proxy_fence=False))
    assert report.races == [] and len(report.async_protocol) == 4
    assert report.async_protocol[0] == (
        f"kernel wgmma: `{FIRST}` of the warpgroup of thread (0, 0, 0) reads a_tile[0][0] in block (0, 0, 0), which "
        "thread (0, 0, 0) wrote with no AsyncProxyFence since: the tensor cores read through the async proxy, which "
        "may not see the write; put an AsyncProxyFence after the writes, before the barrier; 1024 such accesses at "
        "this site")
    assert f"`{SECOND}` of the warpgroup of thread (0, 0, 0) reads b_tile[0][8] in block (0, 0, 0), which thread " \
           "(8, 0, 0) wrote" in report.async_protocol[3]


def test_accumulators_stored_without_a_wgmma_fence_are_a_fault():
    *_, report = run(warpgroup_product(wgmma_fence=False))
    assert len(report.faults) == 2
    assert report.async_protocol[0] == (
        f"kernel wgmma: `{FIRST}` by block (0, 0, 0) thread (0, 0, 0) accumulates into register acc[0], which an "
        "ordinary statement accessed since the thread's last WgmmaFence: put a WgmmaFence between that access and "
        "the wgmma, or the tensor cores may not see it; 4096 such accesses at this site")


def test_reading_the_accumulators_before_the_wait_is_a_fault():
    *_, report = run(warpgroup_product(wait=False))
    assert report.races == []
    assert len(report.async_protocol) == 17
    assert report.async_protocol[0] == (
        f"kernel wgmma: load from register acc[0] by block (0, 0, 0) thread (0, 0, 0) while `{SECOND}`, which uses "
        "it, is still pending: commit the wgmma (WgmmaCommit) and wait for its group (WgmmaWait) before touching its "
        "registers; 256 such accesses at this site")
    assert report.async_protocol[-1] == (
        f"kernel wgmma: the kernel ends while `{SECOND}` of block (0, 0, 0) thread (0, 0, 0) is still pending: wait "
        "for every wgmma (WgmmaCommit, then WgmmaWait(0)) before the kernel ends; 256 such accesses at this site")


def pipelined(*then: kir.Stmt) -> kir.Kernel:
    """Each wgmma in a group of its own, a wait for all but the newest group, then ``then``."""
    kernel = warpgroup_product(wait=False)
    first = wgmma_steps(kernel)[0]

    def edit(s):
        if s == first:
            return [s, kir.WgmmaCommit()]
        if isinstance(s, kir.WgmmaCommit):
            return [s, kir.WgmmaWait(1), *then]
        return [s]

    return edited(kernel, edit)


def test_a_wait_completes_every_group_but_the_newest_pending_ones():
    *_, report = run(pipelined())
    assert len(report.async_protocol) == 17
    assert all(f"`{SECOND}`" in message for message in report.async_protocol)
    a, b, c, d, report = run(pipelined(kir.WgmmaWait(0)))
    assert report.faults == []
    torch.testing.assert_close(d.double(), tf32_product(a, b) + c.double(), rtol=1e-6, atol=1e-6)


def test_a_wgmma_never_committed_is_still_pending_after_a_wait():
    kernel = edited(warpgroup_product(), lambda s: [] if isinstance(s, kir.WgmmaCommit) else [s])
    *_, report = run(kernel)
    assert len(report.async_protocol) == 17
    assert report.async_protocol[-1].startswith(f"kernel wgmma: the kernel ends while `{SECOND}` of block (0, 0, 0) "
                                                "thread (0, 0, 0) is still pending")


def overwritten_after(kind: type) -> kir.Kernel:
    """``warpgroup_product`` where every thread stores to row ``threadIdx.x // 32`` of ``b_tile``
    after a barrier that follows the first statement of type ``kind``."""
    store = kir.Store("b_tile", (TX // 32, TX % 32), const(1.0))
    return edited(warpgroup_product(), lambda s: [s, kir.Barrier(), store] if isinstance(s, kind) else [s])


def test_overwriting_the_operands_of_a_pending_wgmma_is_a_race():
    *_, report = run(overwritten_after(kir.WgmmaCommit))
    assert report.async_protocol == []
    assert report.races == [
        f"kernel wgmma: b_tile[0][0] in block (0, 0, 0) written by thread (0, 0, 0) while `{FIRST}` still reads it: "
        "wait for that wgmma (WgmmaWait) before overwriting its operands; 128 such accesses at this site"]
    *_, report = run(overwritten_after(kir.WgmmaWait))
    assert report.faults == []


def copied_with_cp_async(*steps: kir.Stmt) -> kir.Kernel:
    """One warpgroup: ``d = a @ b^T`` (a 64 x 8, b 8 x 8) through swizzled tiles that cp.async
    fills, with ``steps`` between the copies' commit and the wgmma."""
    warp, g, t = TX // 32, TX % 32 // 4, TX % 4
    copies = [kir.CpAsync("a_tile", ((TX + 128 * q) // 8, (TX + 128 * q) % 8), "a", (TX + 128 * q,), 4)
              for q in range(4)]
    copies.append(kir.If(op("lt", TX, 64), [kir.CpAsync("b_tile", (TX // 8, TX % 8), "b", (TX,), 4)]))

    def place(p: int):
        return (warp * 16 + g + 8 * (p // 2)) * 8 + 2 * t + p % 2

    wgmma = kir.WgmmaTf32("acc", [(const(p),) for p in range(4)], "a_tile", (const(0), const(0)), "b_tile",
                          (const(0), const(0)), 8, accumulate=False)
    return kir.Kernel(
        name="copied",
        params=[kir.Param("a", F32, 64 * 8), kir.Param("b", F32, 8 * 8), kir.Param("d", F32, 64 * 8, writable=True)],
        arrays=[kir.Array("a_tile", F32, (64, 32), "shared", swizzle=128),
                kir.Array("b_tile", F32, (8, 32), "shared", swizzle=128),
                kir.Array("acc", F32, (4,), "register")],
        body=[*copies, kir.CpAsyncCommit(), *steps, kir.WgmmaFence(), wgmma, kir.WgmmaCommit(), kir.WgmmaWait(0),
              *[kir.Store("d", (place(p),), kir.Load("acc", (const(p),), F32)) for p in range(4)]],
        launch=kir.Launch((1, 1, 1), (128, 1, 1)),
    )


def run_copied(kernel: kir.Kernel):
    a, b = torch.randn(64, 8), torch.randn(8, 8)
    d = torch.full((64 * 8,), float("nan"))
    report = simulate(kernel, {"a": a.flatten(), "b": b.flatten(), "d": d}, raise_on_fault=False)
    return a, b, d.view(64, 8), report


def test_cp_async_operands_need_the_proxy_fence_after_their_wait():
    kernel = copied_with_cp_async(kir.CpAsyncWait(0), kir.AsyncProxyFence(), kir.Barrier())
    kir.verify_kernel(kernel)
    a, b, d, report = run_copied(kernel)
    assert report.faults == []
    torch.testing.assert_close(d.double(), tf32_product(a, b), rtol=1e-6, atol=1e-6)
    *_, report = run_copied(copied_with_cp_async(kir.AsyncProxyFence(), kir.CpAsyncWait(0), kir.Barrier()))
    assert report.races == [] and len(report.async_protocol) == 2
    assert "reads a_tile[0][0] in block (0, 0, 0), which thread (0, 0, 0) wrote with no AsyncProxyFence since" \
        in report.async_protocol[0]


def test_cp_async_operands_read_before_their_wait_are_a_race():
    *_, report = run_copied(copied_with_cp_async(kir.AsyncProxyFence(), kir.Barrier()))
    assert report.async_protocol == []
    assert report.races[0].startswith("kernel copied: read of cp.async data before its wait: a_tile[0][0] in block "
                                      "(0, 0, 0) read by thread (0, 0, 0), copied by thread (0, 0, 0)")


def test_a_wgmma_that_only_part_of_a_warpgroup_runs_is_an_error():
    with pytest.raises(SimulationError, match=r"runs in only part of the warpgroup of block \(0, 0, 0\) thread "
                                              r"\(0, 0, 0\) \(64 of its 128 threads\)"):
        run(warpgroup_product(running=64))


def test_blocks_of_part_of_a_warpgroup_are_an_error():
    kernel = warpgroup_product()
    with pytest.raises(SimulationError, match="wgmma in blocks of 192 threads; a wgmma needs blocks of whole "
                                              "warpgroups of 128 threads"):
        run(attrs.evolve(kernel, launch=kir.Launch((1, 1, 1), (192, 1, 1))))


def test_an_operand_that_starts_off_the_eight_row_pattern_is_refused():
    kernel = warpgroup_product(a_row=4)
    with pytest.raises(VerificationError, match="wgmma operand a_tile starts at row 4, not a multiple of 8"):
        kir.verify_kernel(kernel)
    with pytest.raises(SimulationError, match=r"reads a_tile from a_tile\[4\]\[0\]; a wgmma operand starts at a row "
                                              "and a column that are multiples of 8"):
        run(kernel)


def test_an_operand_whose_column_is_known_only_at_run_time_is_checked_then():
    kernel = warpgroup_product()
    first = wgmma_steps(kernel)[0]
    column = edited(kernel, lambda s: [attrs.evolve(s, b_index=(const(0), Var("g") // 8 + 4))] if s == first else [s])
    kir.verify_kernel(column)
    with pytest.raises(SimulationError, match=r"reads b_tile from b_tile\[0\]\[4\]"):
        run(column)


def test_the_threads_of_a_warpgroup_must_agree_on_the_operands():
    kernel = warpgroup_product()
    first = wgmma_steps(kernel)[0]
    spread = edited(kernel, lambda s: [attrs.evolve(s, a_index=(Var("warp") * 8, const(0)))] if s == first else [s])
    with pytest.raises(SimulationError, match=r"block \(0, 0, 0\) thread \(0, 0, 0\) reads a_tile at \[0\]\[0\] but "
                                              r"thread \(32, 0, 0\) of its warpgroup at \[8\]\[0\]; every thread of a "
                                              "warpgroup gives the same operand index"):
        run(spread)


def test_the_reads_of_a_wgmma_are_not_counted_for_bank_conflicts():
    kernel = warpgroup_product()
    *_, report = run(kernel)
    *_, without = run(edited(kernel, lambda s: [] if isinstance(s, kir.WgmmaTf32) else [s]))
    assert report.bank_conflicts == without.bank_conflicts


def column_store(swizzle: int) -> kir.Kernel:
    """A warp stores element 0 of rows 0..31 of a 32 x 32 float32 array, 128 bytes apart."""
    return kir.Kernel(
        name="column", params=[], arrays=[kir.Array("tile", F32, (32, 32), "shared", swizzle=swizzle)],
        body=[kir.Store("tile", (TX, const(0)), const(1.0))],
        launch=kir.Launch((1, 1, 1), (32, 1, 1)),
    )


def test_bank_conflicts_of_a_swizzled_array_are_counted_where_its_elements_are_stored():
    # Unswizzled, all 32 words share bank 0; swizzled, row r's first chunk moves to chunk r % 8,
    # spreading them over 8 banks, 4 words each.
    assert simulate(column_store(0), {}).bank_conflicts == {"tile": 31}
    assert simulate(column_store(128), {}).bank_conflicts == {"tile": 3}


@pytest.mark.parametrize("dtype", [dtypes.bfloat16, dtypes.float16])
@pytest.mark.parametrize("warpgroups, n, k", [(1, 32, 32), (2, 64, 16), (1, 128, 64)])
def test_sixteen_bit_a_from_registers_is_packed_pairs_in_the_accumulators_layout(dtype, warpgroups, n, k):
    kernel = sixteen_bit_product_from_registers(dtype, warpgroups, n, k)
    kir.verify_kernel(kernel)
    torch.manual_seed(0)
    to = {dtypes.bfloat16: torch.bfloat16, dtypes.float16: torch.float16}[dtype]
    a, b = torch.randn(64 * warpgroups, k), torch.randn(n, k).to(to)
    arrays = {"a": a.flatten(), "b": b.flatten(), "d": torch.full((64 * warpgroups * n,), float("nan"))}
    report = simulate(kernel, arrays, raise_on_fault=False)
    assert report.faults == []
    expected = a.to(to).double() @ b.double().T
    torch.testing.assert_close(arrays["d"].view(64 * warpgroups, n).double(), expected, rtol=1e-6, atol=1e-5)
    assert not torch.allclose(arrays["d"].view(64 * warpgroups, n).double(), a.double() @ b.double().T,
                              rtol=1e-6, atol=1e-5)


def test_a_sixteen_bit_word_of_a_overwritten_before_the_wait_is_a_fault():
    kernel = sixteen_bit_product_from_registers(dtypes.bfloat16, overwrite_a=True)
    arrays = {"a": torch.randn(64 * 32), "b": torch.randn(32 * 32).bfloat16(), "d": torch.zeros(64 * 32)}
    report = simulate(kernel, arrays, raise_on_fault=False)
    assert len(report.async_protocol) == 1
    assert "store to register a_words[0]" in report.async_protocol[0]


def test_sixteen_bit_a_from_registers_must_be_words_of_an_int32_array():
    kernel = sixteen_bit_product_from_registers(dtypes.bfloat16)
    first = next(s for s in kernel.body if isinstance(s, kir.Wgmma))
    bad = attrs.evolve(first, a=(kir.Load("acc", (const(0),), F32),) * 4)
    with pytest.raises(VerificationError, match=r"must be an element of an i32 register array \(two bf16 elements"):
        kir.verify_kernel(edited(kernel, lambda s: [bad] if s is first else [s]))

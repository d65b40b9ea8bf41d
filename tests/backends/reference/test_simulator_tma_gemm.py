"""A pipelined, warp-specialised Hopper GEMM (TMA, mbarriers, bf16 and fp16 wgmma) run by the
simulator on ragged shapes, and the faults it must catch."""

from __future__ import annotations

import pytest
import torch

from lamina.backends.reference.simulator import simulate
from lamina.core.errors import SimulationError
from lamina.core.ir import dtypes
from tests.backends.tma_gemm_kernels import buffers, operands, tma_gemm

_TORCH = {dtypes.bfloat16: torch.bfloat16, dtypes.float16: torch.float16}


@pytest.mark.parametrize("m, n, k, dtype, block_m, block_n, stages", [
    (70, 40, 200, dtypes.bfloat16, 64, 32, 3),    # ragged in m, n and k; the ring of stages wraps around
    (37, 24, 72, dtypes.float16, 64, 16, 2),
    (130, 56, 136, dtypes.bfloat16, 128, 56, 2),  # two wgmma slices of 64 rows per block
])
def test_the_pipelined_product_agrees_with_eager_on_ragged_shapes(m, n, k, dtype, block_m, block_n, stages):
    a, b = operands(m, n, k, _TORCH[dtype])
    arrays = buffers(a, b)
    report = simulate(tma_gemm(m, n, k, dtype=dtype, block_m=block_m, block_n=block_n, stages=stages), arrays)
    assert not report.faults
    c = arrays["c"].view(m, n)
    eager = torch.matmul(a, b.T)
    torch.testing.assert_close(c.to(eager.dtype), eager, rtol=1.6e-2, atol=1e-2)
    exact = a.double() @ b.double().T
    scale = a.abs().double() @ b.abs().double().T
    assert ((c.double() - exact).abs() / scale).max() < 1e-6


def test_a_stage_released_before_its_wgmma_completes_is_a_race():
    a, b = operands(70, 40, 200)
    report = simulate(tma_gemm(70, 40, 200, release_before_wait=True), buffers(a, b), raise_on_fault=False)
    assert len(report.races) == 2 and not report.out_of_bounds and not report.unwritten_reads
    assert report.races[0].startswith(
        "kernel tma_gemm: a_tile[0][0][0] in block (0, 0, 0) written by a TMA copy by thread (0, 0, 0) while "
        "`wgmma m64n32k16 bf16 (acc[0][0]..acc[0][15]) += a_tile[s][0..63][0..15] x b_tile[s][0..31][0..15]^T` "
        "still reads it")


def test_a_wrong_transaction_count_is_a_deadlock_that_names_the_barriers():
    a, b = operands(70, 40, 200)
    with pytest.raises(SimulationError) as caught:
        simulate(tma_gemm(70, 40, 200, extra_transaction_bytes=2), buffers(a, b))
    message = str(caught.value)
    assert "deadlock" in message
    assert ("block (0, 0, 0) thread (128, 0, 0) (and 511 more threads) waits for the phase of parity 0 of mbarrier "
            "full[0] of block (0, 0, 0), in phase 0, 0 of its 1 arrivals and 2 transaction bytes still to come") in message
    assert "waits for the phase of parity 0 of mbarrier empty[0] of block (0, 0, 0)" in message


@pytest.mark.parametrize("m, n, k, dtype, block_m, block_n", [
    (70, 40, 200, dtypes.bfloat16, 64, 32),
    (130, 20, 72, dtypes.float16, 128, 16),
])
def test_a_tma_store_writes_only_what_falls_inside_c(m, n, k, dtype, block_m, block_n):
    a, b = operands(m, n, k, _TORCH[dtype])
    arrays = buffers(a, b)
    report = simulate(tma_gemm(m, n, k, dtype=dtype, block_m=block_m, block_n=block_n, tma_store=True), arrays)
    assert not report.faults
    exact = a.double() @ b.double().T
    scale = a.abs().double() @ b.abs().double().T
    assert ((arrays["c"].view(m, n).double() - exact).abs() / scale).max() < 1e-6


def test_a_tma_store_of_writes_with_no_proxy_fence_is_a_fault():
    a, b = operands(70, 40, 200)
    report = simulate(tma_gemm(70, 40, 200, tma_store=True, store_fence=False), buffers(a, b), raise_on_fault=False)
    assert len(report.faults) == 1
    assert report.async_protocol[0].startswith(
        "kernel tma_gemm: `tma store c_map at (blockIdx.y * 64, blockIdx.x * 32) <- c_tile[0][0]` by block (0, 0, 0) "
        "thread (0, 0, 0) reads c_tile[0][0] in block (0, 0, 0), which thread (128, 0, 0) wrote with no "
        "AsyncProxyFence since")

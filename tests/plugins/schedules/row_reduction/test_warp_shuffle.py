"""Warp shuffles in Kernel IR: printed, verified, simulated in lockstep and written as CUDA."""

import pytest
import torch

from lamina.backends.cuda.codegen import emit_cuda, kernel_symbol
from lamina.backends.cuda.nvrtc import compile_kernel
from lamina.backends.reference.simulator import simulate
from lamina.core.errors import SimulationError, VerificationError
from lamina.core.ir import dtypes, expr as ex, kernel_ir as kir


def warp_sum_kernel(dtype=dtypes.float32, threads=64, guard=None):
    """Each warp adds up its lanes' values with a butterfly; every lane stores the total."""
    tid = kir.thread_idx("x")
    acc = ex.Var("acc", dtypes.float32)
    butterfly = [kir.Assign("acc", ex.op("add", acc, kir.ShuffleXor(acc, m))) for m in (16, 8, 4, 2, 1)]
    if guard is not None:
        butterfly = [kir.If(guard, tuple(butterfly))]
    return kir.Kernel(
        name="warp_sum",
        params=(kir.Param("x", dtype, threads), kir.Param("y", dtype, threads, writable=True)),
        arrays=(),
        body=(kir.Declare("acc", dtypes.float32, ex.cast(kir.Load("x", (tid,), dtype), dtypes.float32)),
              *butterfly,
              kir.Store("y", (tid,), ex.cast(acc, dtype))),
        launch=kir.Launch((1, 1, 1), (threads, 1, 1)),
    )


def test_a_butterfly_leaves_each_warps_total_in_every_lane():
    x = torch.randn(64)
    y = torch.zeros(64)
    simulate(warp_sum_kernel(), {"x": x, "y": y})
    expected = x.view(2, 32).double().sum(1).repeat_interleave(32)
    assert torch.allclose(y.double(), expected, atol=1e-5)


def test_a_shuffle_that_only_part_of_a_warp_reaches_is_an_error():
    half = ex.op("lt", kir.thread_idx("x"), 16)
    with pytest.raises(SimulationError, match="every lane of a warp must shuffle together"):
        simulate(warp_sum_kernel(guard=half), {"x": torch.randn(64), "y": torch.zeros(64)})


def test_a_shuffle_past_the_last_lane_of_a_partial_warp_is_an_error():
    with pytest.raises(SimulationError, match="past the end of the block"):
        simulate(warp_sum_kernel(threads=48), {"x": torch.randn(48), "y": torch.zeros(48)})


def test_shuffles_print_with_their_lane_mask():
    text = kir.format_kernel(warp_sum_kernel())
    assert "acc = acc + shuffle_xor(acc, 16)" in text


@pytest.mark.parametrize("mask, value, message", [
    (0, ex.Var("acc", dtypes.float32), "lane mask 0"),
    (32, ex.Var("acc", dtypes.float32), "lane mask 32"),
    (1, ex.op("lt", ex.Var("acc", dtypes.float32), 0.0), "shuffle of a bool"),
])
def test_the_verifier_refuses_bad_shuffles(mask, value, message):
    kernel = warp_sum_kernel()
    broken = kir.Kernel(kernel.name, kernel.params, kernel.arrays,
                        kernel.body[:1] + (kir.Assign("acc", ex.cast(kir.ShuffleXor(value, mask), dtypes.float32)),),
                        kernel.launch)
    with pytest.raises(VerificationError, match=message):
        kir.verify_kernel(broken)


def test_cuda_shuffles_the_full_warp():
    source = emit_cuda(warp_sum_kernel())
    assert "acc = acc + __shfl_xor_sync(0xffffffffu, acc, 16);" in source
    compiled = compile_kernel(source, kernel_symbol(warp_sum_kernel()), "sm_90")
    assert (compiled.spill_stores, compiled.spill_loads) == (0, 0)


def test_half_precision_values_are_shuffled_as_float():
    tid = kir.thread_idx("x")
    value = kir.Load("x", (tid,), dtypes.bfloat16)
    kernel = kir.Kernel(
        name="shuffle_bf16",
        params=(kir.Param("x", dtypes.bfloat16, 32), kir.Param("y", dtypes.bfloat16, 32, writable=True)),
        arrays=(),
        body=(kir.Store("y", (tid,), kir.ShuffleXor(value, 1)),),
        launch=kir.Launch((1, 1, 1), (32, 1, 1)),
    )
    source = emit_cuda(kernel)
    assert "static_cast<__nv_bfloat16>(__shfl_xor_sync(0xffffffffu, static_cast<float>(x[" in source
    compile_kernel(source, kernel_symbol(kernel), "sm_90")
    x = torch.randn(32).to(torch.bfloat16)
    y = torch.zeros(32, dtype=torch.bfloat16)
    simulate(kernel, {"x": x, "y": y})
    assert torch.equal(y, x.view(16, 2).flip(1).reshape(32))

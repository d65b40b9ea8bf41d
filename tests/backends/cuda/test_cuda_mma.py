"""Tensor-core multiply-adds and tf32 rounding as CUDA: compiled by NVRTC, and on the GPU equal to the simulator."""

from __future__ import annotations

import pytest
import torch

from lamina.backends.cuda import LaunchableKernel, compile_kernel, emit_cuda, kernel_symbol
from lamina.backends.reference import tf32
from lamina.backends.reference.simulator import simulate
from lamina.core.ir import dtypes
from tests.backends.mma_kernels import (
    ROUNDING_CASES, WARPS, one_mma_per_warp, one_sixteen_bit_mma_per_warp, operands, sixteen_bit_operands,
    tf32_rounding,
)


def gpu(test):
    return pytest.mark.gpu(pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU is visible")(test))


def test_an_mma_is_one_inline_ptx_instruction_and_compiles_for_sm_90(tmp_path):
    source = emit_cuda(one_mma_per_warp())
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in source
    assert "lamina_mma_tf32(acc[0], acc[1], acc[2], acc[3], a[" in source
    compiled = compile_kernel(source, kernel_symbol(one_mma_per_warp()), "sm_90", cache_dir=tmp_path)
    assert (compiled.spill_stores, compiled.spill_loads) == (0, 0)


@pytest.mark.parametrize("dtype", [dtypes.bfloat16, dtypes.float16])
def test_a_sixteen_bit_mma_is_one_inline_ptx_instruction_and_compiles_for_sm_80_and_sm_90(dtype, tmp_path):
    kernel = one_sixteen_bit_mma_per_warp(dtype)
    source = emit_cuda(kernel)
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{dtype.short}.{dtype.short}.f32" in source
    pair = f"lamina_{dtype.short}x2(static_cast<float>(a["
    assert f"lamina_mma_{dtype.short}(acc[0], acc[1], acc[2], acc[3], {pair}" in source
    for arch in ("sm_80", "sm_90"):
        compiled = compile_kernel(source, kernel_symbol(kernel), arch, cache_dir=tmp_path)
        assert (compiled.spill_stores, compiled.spill_loads) == (0, 0)


def test_tf32_rounding_is_integer_arithmetic_on_the_bits(tmp_path):
    source = emit_cuda(tf32_rounding(len(ROUNDING_CASES)))
    assert "(__float_as_uint(x) + 0x1000u) & 0xffffe000u" in source
    compile_kernel(source, "tf32_round", "sm_90", cache_dir=tmp_path)


def on_the_gpu(kernel, buffers: dict[str, torch.Tensor], output: str, tmp_path) -> torch.Tensor:
    compiled = compile_kernel(emit_cuda(kernel), kernel_symbol(kernel), "sm_90", cache_dir=tmp_path)
    on_device = {name: t.cuda() for name, t in buffers.items()}
    LaunchableKernel(kernel, compiled)(on_device)
    return on_device[output].cpu()


@gpu
def test_the_gpu_adds_what_the_simulator_adds(tmp_path):
    a, b, c = operands()
    buffers = {"a": a.flatten(), "b": b.flatten(), "c": c.flatten(), "d": torch.full((WARPS * 128,), float("nan"))}
    simulated = buffers["d"].clone()
    simulate(one_mma_per_warp(), {**buffers, "d": simulated})
    computed = on_the_gpu(one_mma_per_warp(), buffers, "d", tmp_path)
    torch.testing.assert_close(computed, simulated, rtol=1e-6, atol=1e-6)
    exact = (a.double() @ b.double() + c.double()).flatten().float()
    assert not torch.allclose(computed, exact, rtol=1e-6, atol=1e-6)


@gpu
def test_tf32_rounding_on_the_gpu_is_the_simulators_bit_for_bit(tmp_path):
    x = torch.tensor(ROUNDING_CASES)
    computed = on_the_gpu(tf32_rounding(x.numel()), {"x": x, "y": torch.zeros_like(x)}, "y", tmp_path)
    assert torch.equal(computed.view(torch.int32), tf32.rounded(x).view(torch.int32))


@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_gpu_adds_the_sixteen_bit_products_the_simulator_adds(dtype, tmp_path):
    a, b, c = sixteen_bit_operands(dtype)
    kernel = one_sixteen_bit_mma_per_warp(dtypes.from_name(str(dtype).removeprefix("torch.")))
    buffers = {"a": a.flatten(), "b": b.flatten(), "c": c.flatten(), "d": torch.full((WARPS * 128,), float("nan"))}
    simulated = buffers["d"].clone()
    simulate(kernel, {**buffers, "d": simulated})
    computed = on_the_gpu(kernel, buffers, "d", tmp_path)
    torch.testing.assert_close(computed, simulated, rtol=1e-5, atol=1e-5)

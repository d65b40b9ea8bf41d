"""Pointwise kernels compiled by NVRTC and run on the GPU: results against PyTorch on the
transformer shapes too large to simulate. Their speed is measured by ``lamina bench``."""

import pytest
import torch

from lamina.backends.cuda.targets import SM90 as SM_90
from lamina.bench.measure import relative_error
from lamina.plugins.schedules.pointwise import PointwiseSchedule
from lamina.runtime.program_runner import torch_dtype

from .kernels import BF16, F32, broadcast_row, cast, rope, silu_up, tolerance, transpose

SCHEDULE = PointwiseSchedule()

QWEN = {
    "silu_up_bf16": silu_up((2048, 18944), BF16),
    "silu_up_f32": silu_up((2048, 18944), F32),
    "rope_q_f32": rope(28, 2048, 128, F32),
    "rope_q_bf16": rope(28, 2048, 128, BF16),
}
OTHERS = {
    "cast_to_bf16": cast((2048, 3584), F32),
    "residual_broadcast": broadcast_row((2048, 3584), BF16),
    "transpose": transpose((1000, 3000), F32),
    "ragged_rows": silu_up((1021, 1030), BF16),
}
def launchable(case, knobs=None):
    from lamina.backends.cuda.codegen import emit_cuda, kernel_symbol
    from lamina.backends.cuda.driver import LaunchableKernel, device_arch
    from lamina.backends.cuda.nvrtc import compile_kernel

    kernel = SCHEDULE.lower(SCHEDULE.schedule(case.kernel, SM_90, knobs or {}), SM_90)
    launch = LaunchableKernel(kernel, compile_kernel(emit_cuda(kernel), kernel_symbol(kernel), device_arch()))
    inputs = case.inputs()
    (out,) = case.kernel.outputs
    buffers = {b.name: t.cuda().reshape(-1) for b, t in zip(case.kernel.inputs, inputs)}
    buffers[out.name] = torch.full(out.type.shape, float("nan"), dtype=torch_dtype(out.type.dtype), device="cuda").reshape(-1)
    return launch, buffers, inputs, out


@pytest.mark.gpu
@pytest.mark.parametrize("knobs", [{}, {"vectors_per_thread": 8, "threads": 128}], ids=["chosen", "eight_per_thread"])
@pytest.mark.parametrize("name", list(QWEN) + list(OTHERS))
def test_matches_pytorch_on_the_gpu(name, knobs):
    case = {**QWEN, **OTHERS}[name]
    launch, buffers, inputs, out = launchable(case, knobs)
    launch(buffers)
    torch.cuda.synchronize()
    expected = case.reference(*(t.cuda().double() for t in inputs))
    assert relative_error(buffers[out.name].reshape(out.type.shape), expected) < tolerance(case)

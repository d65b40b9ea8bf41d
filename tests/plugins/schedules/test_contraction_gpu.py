"""Contraction kernels compiled by NVRTC and run on the GPU, against PyTorch, on shapes too large to simulate."""

import pytest
import torch

from lamina.bench.measure import float64_reference, relative_error
from lamina.core.ir import dtypes
from lamina.plugins.schedules.contraction import ContractionSchedule
from lamina.runtime.program_runner import torch_dtype

from .contraction_kernels import (
    SM_90,
    batched,
    batched_scores,
    broadcast,
    half_inputs,
    linear,
    matmul,
    matmul_a_transposed,
    row_scaled,
    running_example,
)

SCHEDULE = ContractionSchedule()

RUNS = {
    "running_example": (running_example(), {}),
    "ragged_517x1031x389": (matmul(517, 1031, 389), {}),
    "batched": (batched(4, 200, 300, 250), {}),
    "linear_bias_relu": (linear(300, 520, 700, bias_relu=True), {}),
    "transposed_rows_operand": (matmul_a_transposed(333, 444, 555), {}),
    "broadcast": (broadcast((2, 3), 100, 200, 150), {}),
    "row_scaled": (row_scaled(210, 300, 170), {}),
    "float64": (matmul(190, 370, 210, dtype=dtypes.float64), {}),
    "float16_inputs": (half_inputs(190, 370, 210), {}),
    "one_buffer": (matmul(517, 1031, 389), {"buffers": 1}),
    "register_tile_4x4": (matmul(517, 1031, 389), {"block_m": 64, "block_n": 64}),
    "dynamic_shared_memory": (matmul(517, 1031, 389), {"block_m": 128, "block_n": 128, "block_k": 32}),
    "tensor_cores": (matmul(517, 1031, 389), {"products": "mma_sync"}),
    "tensor_cores_linear_bias_relu": (linear(300, 520, 700, bias_relu=True), {"products": "mma_sync"}),
    "tensor_cores_batched_64x64_blocks": (batched(4, 200, 300, 250), {"products": "mma_sync", "block_m": 64,
                                                                       "block_n": 64}),
    "wgmma_linear_bias_relu": (linear(300, 520, 700, bias_relu=True), {"products": "wgmma"}),
    "wgmma_128x128_two_buffers": (linear(517, 1032, 389), {"products": "wgmma", "block_m": 128, "block_n": 128,
                                                            "buffers": 2}),
    "wgmma_batched_scores_64x64_blocks": (batched_scores(4, 200, 300, 250), {"products": "wgmma", "block_m": 64,
                                                                              "block_n": 64}),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", RUNS)
def test_matches_pytorch_on_the_gpu(name):
    from lamina.backends.cuda.codegen import emit_cuda, kernel_symbol
    from lamina.backends.cuda.driver import LaunchableKernel, device_arch
    from lamina.backends.cuda.nvrtc import compile_kernel
    from lamina.backends.cuda.wgmma import kernel_arch

    case, knobs = RUNS[name]
    kernel = SCHEDULE.lower(SCHEDULE.schedule(case.kernel, SM_90, knobs), SM_90)
    arch = kernel_arch(kernel, device_arch())
    launch = LaunchableKernel(kernel, compile_kernel(emit_cuda(kernel), kernel_symbol(kernel), arch))
    inputs = case.inputs()
    (out,) = case.kernel.outputs
    buffers = {n: t.cuda().reshape(-1) for n, t in inputs.items()}
    buffers[out.name] = torch.full(out.type.shape, float("nan"), dtype=torch_dtype(out.type.dtype), device="cuda").reshape(-1)
    launch(buffers)
    torch.cuda.synchronize()
    expected = float64_reference(case.reference, tuple(inputs.values()))
    assert relative_error(buffers[out.name].reshape(out.type.shape), expected) < 1e-5


@pytest.mark.gpu
def test_tensor_core_products_are_as_close_to_float64_as_cublas():
    import torch.nn.functional as F

    import lamina

    x, w = torch.randn(256, 4096, device="cuda"), torch.randn(320, 4096, device="cuda")
    compiled = lamina.Compiler(knobs={"contraction.products": "mma_sync"}).compile(F.linear, (x, w))
    out = compiled(x, w)
    assert [t.settings.products if t.settings else None for t in compiled.compilation.tiles] == ["3xtf32", None]  # split-K partials, then their sum
    reference = F.linear(x.double(), w.double())
    assert relative_error(out, reference) < 2 * relative_error(F.linear(x, w), reference)


@pytest.mark.gpu
def test_wgmma_products_are_as_close_to_float64_as_cublas():
    import torch.nn.functional as F

    import lamina

    x, w = torch.randn(256, 4096, device="cuda"), torch.randn(320, 4096, device="cuda")
    compiled = lamina.Compiler(knobs={"contraction.products": "wgmma"}).compile(F.linear, (x, w))
    out = compiled(x, w)
    assert "wgmma 3xtf32" in [t.settings.products if t.settings else None for t in compiled.compilation.tiles]
    reference = F.linear(x.double(), w.double())
    assert relative_error(out, reference) < 2 * relative_error(F.linear(x, w), reference)

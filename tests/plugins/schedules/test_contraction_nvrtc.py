"""Every kernel the contraction schedule writes compiles with NVRTC for sm_90, without spilling registers."""

import pytest

from lamina.backends.cuda.codegen import emit_cuda, kernel_symbol
from lamina.backends.cuda.nvrtc import compile_kernel
from lamina.core.ir import dtypes
from lamina.plugins.schedules.contraction import ContractionSchedule

from .contraction_kernels import (
    SM_90,
    batched,
    broadcast,
    half_inputs,
    linear,
    matmul,
    matmul_a_transposed,
    row_scaled,
    running_example,
)

SCHEDULE = ContractionSchedule()

KERNELS = {
    "running_example": (running_example(), {}),
    "running_example_one_buffer": (running_example(), {"buffers": 1}),
    "ragged_17x65x19": (matmul(17, 65, 19), {}),
    "batched": (batched(3, 20, 24, 36), {}),
    "transposed_operand": (linear(33, 40, 45), {}),
    "broadcast": (broadcast((2, 2), 9, 21, 35), {}),
    "linear_bias_relu": (linear(18, 33, 40, bias_relu=True), {}),
    "a_transposed": (matmul_a_transposed(35, 20, 30), {}),
    "row_scaled": (row_scaled(21, 30, 17), {}),
    "float64": (matmul(19, 37, 21, dtype=dtypes.float64), {}),
    "float16_inputs": (half_inputs(19, 37, 21), {}),
    "register_tile_4x4": (matmul(200, 96, 200), {"block_m": 64, "block_n": 64, "block_k": 16}),
    "dynamic_shared_memory": (matmul(256, 256, 256), {"block_m": 128, "block_n": 128, "block_k": 32}),
}


@pytest.mark.parametrize("name", KERNELS)
def test_compiles_for_sm_90_without_spills(name):
    case, knobs = KERNELS[name]
    kernel = SCHEDULE.lower(SCHEDULE.schedule(case.kernel, SM_90, knobs), SM_90)
    compiled = compile_kernel(emit_cuda(kernel), kernel_symbol(kernel), "sm_90")
    assert compiled.registers > 0
    assert (compiled.spill_stores, compiled.spill_loads) == (0, 0)

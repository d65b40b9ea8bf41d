"""Blocks that stage more than 48 KiB ask for dynamic shared memory in their launch."""

from lamina.backends.cuda.codegen import emit_cuda, launch_shared_bytes
from lamina.core.ir import kernel_ir
from lamina.plugins.schedules.contraction import ContractionSchedule

from ..contraction_kernels import SM_90, matmul

SCHEDULE = ContractionSchedule()
LARGE = {"block_m": 128, "block_n": 128, "block_k": 32, "thread_m": 8, "thread_n": 8, "buffers": 3}


def test_a_large_staged_tile_launches_with_dynamic_shared_memory():
    kernel = SCHEDULE.lower(SCHEDULE.schedule(matmul(256, 256, 256).kernel, SM_90, LARGE), SM_90)
    assert kernel.launch.dynamic_shared_bytes == kernel.shared_bytes > SM_90.max_shared_bytes_per_block
    assert launch_shared_bytes(kernel) == kernel.launch.dynamic_shared_bytes
    assert "dynamic shared" in kernel_ir.format_kernel(kernel).splitlines()[0]
    assert "extern __shared__" in emit_cuda(kernel)


def test_a_small_one_stays_static():
    kernel = SCHEDULE.lower(SCHEDULE.schedule(matmul(40, 48, 40).kernel, SM_90, {}), SM_90)
    assert kernel.launch.dynamic_shared_bytes == 0

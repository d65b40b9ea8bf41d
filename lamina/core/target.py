"""Targets: the device a program is compiled for, and the limits its schedules must respect.

A target's numbers (its multiprocessors, shared memory, L2, bandwidth and arithmetic
rates) are the device's: the plugin that registers a target gives them all, and every
reader (the schedules' cost models, the bench's ceilings) takes them from the target
object. Only what every CUDA architecture lamina compiles for shares has a default.
"""

from __future__ import annotations

import functools

import attrs


@attrs.frozen
class Target:
    name: str
    arch: str  # what NVRTC calls it: sm_90
    # The device's own numbers: keyword-only, without a default.
    sm_count: int = attrs.field(kw_only=True)
    max_shared_bytes_optin: int = attrs.field(kw_only=True)
    """Shared memory one block may have once it opts in (``cudaFuncAttributeMaxDynamicSharedMemorySize``)."""
    l2_bytes: int = attrs.field(kw_only=True)
    memory_bytes_per_us: float = attrs.field(kw_only=True)
    """DRAM bandwidth, bytes read plus written per microsecond (a device-to-device copy's)."""
    fp32_flops_per_us: float = attrs.field(kw_only=True)
    """fp32 multiply-add throughput on the CUDA cores, as cuBLAS SGEMM reaches it (FLOP per microsecond)."""
    tf32_tensor_flops_per_us: float = attrs.field(kw_only=True)
    """tf32 multiply-add throughput on the tensor cores through ``mma.sync`` m16n8k8 with
    operands in registers (FLOP per microsecond)."""
    tf32_wgmma_flops_per_us: float = attrs.field(kw_only=True)
    """tf32 multiply-add throughput on the tensor cores through Hopper's ``wgmma`` (FLOP per microsecond)."""
    bf16_tensor_flops_per_us: float = attrs.field(kw_only=True)
    """bf16 multiply-add throughput on the tensor cores, as cuBLAS's bf16 GEMM reaches it (FLOP per microsecond)."""
    max_threads_per_sm: int = 2048
    max_threads_per_block: int = 1024
    max_shared_bytes_per_block: int = 48 * 1024
    """Shared memory a block may have without opting in: the same on every architecture."""
    registers_per_thread: int = 255
    registers_per_block: int = 64 * 1024
    warp_size: int = 32
    shared_banks: int = 32
    launch_us: float = 2.0
    """What one kernel costs beyond its work (launch and ramp-up), in microseconds."""

    @property
    def compute_capability(self) -> int:
        """The architecture as a number, 90 for sm_90 (0 where ``arch`` holds no digits)."""
        return _compute_capability(self.arch)


@functools.lru_cache(maxsize=None)
def _compute_capability(arch: str) -> int:
    """Kept per name: the cost models ask for it at every setting they weigh."""
    return int("".join(ch for ch in arch if ch.isdigit()) or 0)

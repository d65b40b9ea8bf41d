"""Targets: the device a program is compiled for, and the limits its schedules must respect."""

from __future__ import annotations

import attrs


@attrs.frozen
class Target:
    name: str
    arch: str  # what NVRTC calls it: sm_90
    sm_count: int = 132
    max_threads_per_sm: int = 2048
    max_threads_per_block: int = 1024
    max_shared_bytes_per_block: int = 48 * 1024
    max_shared_bytes_optin: int = 227 * 1024
    registers_per_thread: int = 255
    registers_per_block: int = 64 * 1024
    warp_size: int = 32
    shared_banks: int = 32
    memory_bytes_per_us: float = 4.27e6
    """DRAM bandwidth, bytes read plus written per microsecond (a device-to-device copy's)."""
    fp32_flops_per_us: float = 51e6
    """fp32 multiply-add throughput on the CUDA cores, as cuBLAS SGEMM reaches it (FLOP per microsecond)."""
    tf32_tensor_flops_per_us: float = 318e6
    """tf32 multiply-add throughput on the tensor cores through ``mma.sync`` m16n8k8 with
    operands in registers (FLOP per microsecond), as ``experiments/tensor_cores/mma_rate_experiment.py``
    measured it on the H200."""
    tf32_wgmma_flops_per_us: float = 355e6
    """tf32 multiply-add throughput on the tensor cores through Hopper's ``wgmma`` (FLOP per
    microsecond), as cuBLAS's TF32 GEMM reaches it on the H200 (PERFORMANCE.md)."""
    launch_us: float = 2.0
    """What one kernel costs beyond its work (launch and ramp-up), in microseconds."""

    @property
    def compute_capability(self) -> int:
        """The architecture as a number, 90 for sm_90 (0 where ``arch`` holds no digits)."""
        return int("".join(ch for ch in self.arch if ch.isdigit()) or 0)

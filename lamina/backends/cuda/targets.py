"""The GPUs the CUDA backend knows, with their numbers: the one place lamina writes them down.

The H200's bandwidth and arithmetic rates are measured on one; the A100's come from its
datasheet, derated as the H200's measurements are from its own.
"""

from __future__ import annotations

from lamina.core.target import Target

KIB = 1024
MIB = 1024 * KIB

#: H100 and H200, with the H200's measurements: a device-to-device copy reaches 4.27 TB/s,
#: cuBLAS's SGEMM 51 TFLOP/s, its TF32 GEMM (through wgmma) 355 TFLOP/s and its bf16 GEMM
#: 684 TFLOP/s; ``mma.sync`` m16n8k8 with operands in registers 318 TFLOP/s of tf32
#: (``experiments/tensor_cores/mma_rate_experiment.py``).
SM90 = Target(name="sm_90", arch="sm_90", sm_count=132, max_shared_bytes_optin=227 * KIB, l2_bytes=50 * MIB,
              memory_bytes_per_us=4.27e6, fp32_flops_per_us=51e6, tf32_tensor_flops_per_us=318e6,
              tf32_wgmma_flops_per_us=355e6, bf16_tensor_flops_per_us=684e6)

#: A100 (80 GB). Its tensor-core rates are not measured: it takes the H200's tf32 rates
#: (its schedules choose as they always have) and has no wgmma; bf16 is the datasheet's
#: 312 TFLOP/s derated as the H200's 989 are to 684.
SM80 = Target(name="sm_80", arch="sm_80", sm_count=108, max_shared_bytes_optin=163 * KIB, l2_bytes=40 * MIB,
              memory_bytes_per_us=1.8e6, fp32_flops_per_us=17e6,
              tf32_tensor_flops_per_us=SM90.tf32_tensor_flops_per_us,
              tf32_wgmma_flops_per_us=SM90.tf32_wgmma_flops_per_us, bf16_tensor_flops_per_us=216e6)

"""Registers the CUDA backend and the GPUs it knows, through the same hooks as any plugin."""

from __future__ import annotations

from lamina.backends.cuda.backend import CudaBackend
from lamina.core.hookspecs import hookimpl
from lamina.core.target import Target

KIB = 1024

#: H100 and H200; bandwidth and fp32 throughput as measured on an H200 (copy 4.27 TB/s, SGEMM 51 TFLOP/s).
SM90 = Target(name="sm_90", arch="sm_90", sm_count=132,
              max_shared_bytes_per_block=48 * KIB, max_shared_bytes_optin=227 * KIB,
              memory_bytes_per_us=4.27e6, fp32_flops_per_us=51e6)

#: A100 (80 GB); bandwidth and fp32 throughput from its datasheet, derated as on the H200.
SM80 = Target(name="sm_80", arch="sm_80", sm_count=108,
              max_shared_bytes_per_block=48 * KIB, max_shared_bytes_optin=163 * KIB,
              memory_bytes_per_us=1.8e6, fp32_flops_per_us=17e6)


@hookimpl
def lamina_register_backends(register):
    register(CudaBackend())


@hookimpl
def lamina_register_targets(register):
    register(SM90)
    register(SM80)

"""The CUDA backend: Kernel IR -> CUDA C++ -> NVRTC cubin -> driver-API launches."""

from lamina.backends.cuda.backend import CudaBackend
from lamina.backends.cuda.codegen import emit_cuda, kernel_symbol, launch_shared_bytes
from lamina.backends.cuda.cubin_cache import CubinCache, default_cache_dir
from lamina.backends.cuda.driver import LaunchableKernel, device_arch
from lamina.backends.cuda.nvrtc import CompiledKernel, assert_no_spills, compile_kernel

__all__ = [
    "CompiledKernel",
    "CubinCache",
    "CudaBackend",
    "LaunchableKernel",
    "assert_no_spills",
    "compile_kernel",
    "default_cache_dir",
    "device_arch",
    "emit_cuda",
    "kernel_symbol",
    "launch_shared_bytes",
]

"""NVRTC compiles on a thread of their own, so that a test simulates a kernel while NVRTC compiles it.

NVRTC releases the GIL while it compiles, and compiling a kernel takes about as long as
simulating it: a test that starts the compile first takes about as long as the longer of the two.
"""

from concurrent.futures import Future, ThreadPoolExecutor

from lamina.backends.cuda.codegen import emit_cuda, kernel_symbol
from lamina.backends.cuda.nvrtc import CompiledKernel, compile_kernel
from lamina.core.ir import kernel_ir

_NVRTC = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nvrtc")


def start_compiling(kernel: kernel_ir.Kernel, arch: str) -> Future[CompiledKernel]:
    """``kernel``'s CUDA source being compiled for ``arch``: ``result()`` waits for the compiled
    kernel, or raises what the compile raised."""
    return _NVRTC.submit(compile_kernel, emit_cuda(kernel), kernel_symbol(kernel), arch)

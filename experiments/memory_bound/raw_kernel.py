"""Hand-written CUDA kernels launched as lamina launches its own, for experiments that measure a
kernel design before any schedule emits it."""

from __future__ import annotations

import ctypes

import torch

from lamina.backends.cuda import compile_kernel, device_arch
from lamina.backends.cuda.dependent_launch import LET_NEXT_KERNEL_LAUNCH, WAIT_FOR_PREVIOUS_KERNEL, launch_config
from lamina.backends.cuda.driver import _driver, _module, check, make_context_current

OVERLAP_PROLOGUE = f"{WAIT_FOR_PREVIOUS_KERNEL}\n  {LET_NEXT_KERNEL_LAUNCH}\n"
"""The first statements of a hand-written kernel, as lamina's overlapping kernels start."""


class RawKernel:
    """``name`` in ``source``, compiled with NVRTC for the current GPU and launched on PyTorch's
    current stream with blocks of ``threads``: while the previous kernel finishes
    (``griddepcontrol``; the kernel must wait first) or, with ``overlapping=False``, after it."""

    def __init__(self, source: str, name: str, grid: tuple[int, int, int], threads: int = 256,
                 shared_bytes: int = 0, overlapping: bool = True):
        compiled = compile_kernel(source, name, device_arch())
        driver = self.driver = _driver()
        device = torch.cuda.current_device()
        make_context_current(device)
        module = _module(compiled.cubin, name.encode() + source.encode(), device, name)
        result, self.function = driver.cuModuleGetFunction(module, name.encode())
        check(result, "cuModuleGetFunction", name)
        if shared_bytes:
            (result,) = driver.cuFuncSetAttribute(
                self.function, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_bytes)
            check(result, "cuFuncSetAttribute", name)
        self.name, self.grid, self.threads = name, grid, threads
        self.shared_bytes, self.overlapping, self.spills = shared_bytes, overlapping, compiled.spills

    def __call__(self, *arguments: torch.Tensor | int) -> None:
        """Launch with each tensor passed as its device pointer and each int as a 64-bit integer."""
        values = [ctypes.c_void_p(a.data_ptr()) if isinstance(a, torch.Tensor) else ctypes.c_longlong(a)
                  for a in arguments]
        pointers = (ctypes.c_void_p * len(values))(*(ctypes.addressof(v) for v in values))
        stream = torch.cuda.current_stream().cuda_stream
        block = (self.threads, 1, 1)
        if self.overlapping:
            config = launch_config(self.driver, self.grid, block, self.shared_bytes)
            config.hStream = stream
            (result,) = self.driver.cuLaunchKernelEx(config, self.function, ctypes.addressof(pointers), 0)
        else:
            (result,) = self.driver.cuLaunchKernel(self.function, *self.grid, *block, self.shared_bytes, stream,
                                                   ctypes.addressof(pointers), 0)
        check(result, "launch", self.name)

"""Loading cubins and launching kernels through the CUDA driver API.

Kernels run in PyTorch's primary context of the current device, on PyTorch's
current stream, with tensors' device pointers as arguments: they order with
PyTorch's own work, and CUDA-graph capture records them like any other kernel.
A kernel whose launch overlaps the previous kernel's goes through ``cuLaunchKernelEx`` with
the attribute that allows it (``dependent_launch``), the others through ``cuLaunchKernel``.
A kernel with tensor maps gets them after its pointers, encoded for the buffers' addresses
and kept (``tensor_maps``). A launch neither synchronises nor allocates device memory; modules are loaded
before the first launch (``LaunchableKernel.prepare``), never while a graph is
being captured on that device.
"""

from __future__ import annotations

import ctypes
import hashlib
import threading
from typing import Mapping

import torch

from lamina.backends.cuda import dependent_launch
from lamina.backends.cuda.codegen import launch_shared_bytes
from lamina.backends.cuda.nvrtc import CompiledKernel
from lamina.backends.cuda.tensor_maps import TensorMapArguments
from lamina.core.errors import DeviceError, LaminaError
from lamina.core.ir import kernel_ir as kir
from lamina.core.ir.sizes import evaluate
from lamina.runtime.program_runner import torch_dtype

_POINTER_SIZE = ctypes.sizeof(ctypes.c_void_p)
_lock = threading.Lock()
_contexts: dict[int, object] = {}
_modules: dict[tuple[bytes, int], object] = {}


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError as error:
        raise LaminaError("lamina's CUDA backend needs cuda-python: pip install cuda-python") from error
    return driver


def check(result, call: str, kernel: str | None = None) -> None:
    """Raise a LaminaError naming the driver call (and kernel) unless ``result`` is success."""
    driver = _driver()
    if result == driver.CUresult.CUDA_SUCCESS:
        return
    described, text = driver.cuGetErrorString(result)
    reason = text.decode() if described == driver.CUresult.CUDA_SUCCESS and text else "unknown error"
    where = f" for kernel {kernel}" if kernel else ""
    raise LaminaError(f"the CUDA driver call {call} failed{where}: {result.name} ({reason})")


def device_arch(device: torch.device | int | None = None) -> str:
    """The architecture NVRTC compiles for on ``device`` (the current one by default): ``sm_90``."""
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


def current_device() -> int:
    if not torch.cuda.is_available():
        raise DeviceError("lamina's CUDA backend needs a CUDA GPU, and PyTorch sees none")
    return torch.cuda.current_device()


def make_context_current(device: int) -> None:
    """Make PyTorch's primary context of ``device`` current on this thread."""
    driver = _driver()
    context = _contexts.get(device)
    if context is None:
        with _lock:
            context = _contexts.get(device)
            if context is None:
                torch.cuda.init()
                (result,) = driver.cuInit(0)
                check(result, "cuInit")
                result, handle = driver.cuDeviceGet(device)
                check(result, "cuDeviceGet")
                result, context = driver.cuDevicePrimaryCtxRetain(handle)
                check(result, "cuDevicePrimaryCtxRetain")
                _contexts[device] = context
    (result,) = driver.cuCtxSetCurrent(context)
    check(result, "cuCtxSetCurrent")


def _module(cubin: bytes, digest: bytes, device: int, kernel: str):
    """The cubin loaded on ``device``; each cubin is loaded once per device and process."""
    key = (digest, device)
    module = _modules.get(key)
    if module is None:
        with _lock:
            module = _modules.get(key)
            if module is None:
                result, module = _driver().cuModuleLoadData(cubin)
                check(result, "cuModuleLoadData", kernel)
                _modules[key] = module
    return module


def _stream_by_torch(device: int) -> int:
    return torch.cuda.current_stream(device).cuda_stream


_current_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or _stream_by_torch
"""The handle of PyTorch's current stream on a device, read as a raw handle where this build of
PyTorch offers one: building a ``torch.cuda.Stream`` at every launch took from half as long as the driver's
launch call itself to longer (``experiments/launch_overhead/``)."""


class _Arguments:
    """The ``void **`` a launch passes: the address of each pointer, then of each size (by value),
    then of each tensor map. The arrays are made once per kernel and thread, and a launch writes
    its values into them."""

    def __init__(self, pointers: int, sizes: int, tensor_maps: int):
        self.pointers = (ctypes.c_void_p * pointers)()
        self.sizes = (ctypes.c_longlong * sizes)()
        self._slots = (ctypes.c_void_p * (pointers + sizes + tensor_maps))()
        self._first_map = pointers + sizes
        self._maps: list[ctypes.Array] = []
        for i in range(pointers):
            self._slots[i] = ctypes.addressof(self.pointers) + i * _POINTER_SIZE
        for i in range(sizes):
            self._slots[pointers + i] = ctypes.addressof(self.sizes) + i * ctypes.sizeof(ctypes.c_longlong)
        self.address = ctypes.addressof(self._slots) if len(self._slots) else None

    def point_at_tensor_maps(self, maps: list[ctypes.Array]) -> None:
        self._maps = maps  # kept alive until the next launch has copied them
        for i, encoded in enumerate(maps):
            self._slots[self._first_map + i] = ctypes.addressof(encoded)


class _ThreadArguments(threading.local):
    """Each thread's ``_Arguments`` of one kernel: the driver reads them during the launch, which
    releases Python's lock, so two threads launching the same kernel must not share them."""

    def __init__(self, pointers: int, sizes: int, tensor_maps: int):
        self.shape = (pointers, sizes, tensor_maps)
        self.arguments: _Arguments | None = None

    def get(self) -> _Arguments:
        if self.arguments is None:
            self.arguments = _Arguments(*self.shape)
        return self.arguments


class LaunchableKernel:
    """A compiled Kernel IR kernel that launches on PyTorch's current device and stream."""

    def __init__(self, kernel: kir.Kernel, compiled: CompiledKernel, dynamic_shared_bytes: int | None = None):
        """``dynamic_shared_bytes``: ``launch_shared_bytes(kernel)``, where a kernel of the same code
        has already computed it (a walk over the kernel's statements)."""
        self.kernel = kernel
        self.compiled = compiled
        self.name = kernel.name
        self.symbol = compiled.name
        self.sizes = kernel.sizes
        self.grid = kernel.launch.grid if self.sizes else tuple(int(n) for n in kernel.launch.grid)
        self.block = tuple(int(n) for n in kernel.launch.block)
        self.dynamic_shared_bytes = launch_shared_bytes(kernel) if dynamic_shared_bytes is None else dynamic_shared_bytes
        self._nothing_to_do = not self.sizes and 0 in self.grid
        self.params = kernel.params
        self._digest = hashlib.sha256(compiled.cubin).digest()
        self._torch_dtypes = [torch_dtype(p.dtype) for p in kernel.params]
        self._numels = [None if self.sizes else p.numel for p in kernel.params]
        self._arguments = _ThreadArguments(len(kernel.params), len(self.sizes), len(kernel.tensor_maps))
        self._tensor_maps = TensorMapArguments(kernel) if kernel.tensor_maps else None
        self._functions: dict[int, object] = {}
        driver = self._driver = _driver()
        self._launch_call = "cuLaunchKernelEx" if kernel.launch.overlaps_previous_kernel else "cuLaunchKernel"
        self._launch = self._launch_overlapping if kernel.launch.overlaps_previous_kernel else self._launch_after
        self._configs: dict[int, object] = {}
        self._success = driver.CUresult.CUDA_SUCCESS
        self._invalid_context = driver.CUresult.CUDA_ERROR_INVALID_CONTEXT

    def prepare(self, device: int | None = None):
        """Load the kernel on ``device`` (the current one by default) so that launches only launch."""
        device = current_device() if device is None else device
        function = self._functions.get(device)
        if function is not None:
            return function
        driver = _driver()
        with torch.cuda.device(device):
            make_context_current(device)
            module = _module(self.compiled.cubin, self._digest, device, self.name)
            result, function = driver.cuModuleGetFunction(module, self.symbol.encode())
            check(result, "cuModuleGetFunction", self.name)
            if self.dynamic_shared_bytes:
                (result,) = driver.cuFuncSetAttribute(
                    function, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    self.dynamic_shared_bytes)
                check(result, f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={self.dynamic_shared_bytes})", self.name)
            if self.kernel.launch.cluster[0] > kir.MAX_PORTABLE_CLUSTER_BLOCKS:
                (result,) = driver.cuFuncSetAttribute(
                    function, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
                check(result, "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED=1)", self.name)
        self._functions[device] = function
        return function

    def __call__(self, buffers: Mapping[str, torch.Tensor], sizes: Mapping[str, int] | None = None) -> None:
        """Launch with ``buffers[param.name]`` as each parameter: flat contiguous tensors on the current
        device; ``sizes`` gives the value of each size the kernel knows only at run time."""
        grid = self.grid
        if self.sizes:
            grid = kir.launch_grid(self.kernel, sizes)
            if 0 in grid:
                return
        elif self._nothing_to_do:
            return
        device = torch.cuda.current_device()
        function = self._functions.get(device)
        if function is None:
            function = self.prepare(device)
        arguments = self._arguments.get()
        arguments.pointers[:] = self._pointers(buffers, device, sizes)
        if self.sizes:  # after the pointers, by value
            arguments.sizes[:] = [sizes[name] for name in self.sizes]
        if self._tensor_maps is not None:
            arguments.point_at_tensor_maps(self._tensor_maps(buffers, sizes))
        launch = (function, _current_stream(device), arguments.address, grid)
        (result,) = self._launch(*launch)
        if result == self._invalid_context:
            make_context_current(device)
            (result,) = self._launch(*launch)
        if result != self._success:
            check(result, self._launch_call, self.name)

    def _launch_after(self, function, stream: int, arguments, grid):
        """Launch once the previous kernel on ``stream`` has finished."""
        return self._driver.cuLaunchKernel(function, *grid, *self.block, self.dynamic_shared_bytes, stream,
                                           arguments, 0)

    def _launch_overlapping(self, function, stream: int, arguments, grid):
        """Launch while the previous kernel on ``stream`` finishes; one launch configuration per stream
        (and per grid, where the grid depends on sizes known only at run time)."""
        config = self._configs.get((stream, grid))
        if config is None:
            config = dependent_launch.launch_config(self._driver, grid, self.block, self.dynamic_shared_bytes)
            config.hStream = stream
            self._configs[(stream, grid)] = config
        return self._driver.cuLaunchKernelEx(config, function, arguments, 0)

    def _pointers(self, buffers: Mapping[str, torch.Tensor], device: int,
                  sizes: Mapping[str, int] | None) -> list[int]:
        pointers = []
        for param, dtype, numel in zip(self.params, self._torch_dtypes, self._numels):
            tensor = buffers.get(param.name)
            if numel is None:
                numel = evaluate(param.numel, sizes)
            if (tensor is None or tensor.dtype is not dtype or tensor.get_device() != device
                    or tensor.numel() < numel or not tensor.is_contiguous()):
                raise self._rejection(param, tensor, device)
            pointers.append(tensor.data_ptr())
        return pointers

    def _rejection(self, param: kir.Param, tensor: torch.Tensor | None, device: int) -> LaminaError:
        if tensor is None:
            return LaminaError(f"kernel {self.name} was launched without a tensor for its parameter {param.name}")
        if tensor.device != torch.device("cuda", device):
            return LaminaError(
                f"kernel {self.name} runs on cuda:{device}, the current device, but its parameter {param.name} "
                f"is on {tensor.device}; move the tensor, or make its device current with torch.cuda.device"
            )
        if tensor.dtype != torch_dtype(param.dtype):
            return LaminaError(f"kernel {self.name} takes {param.name} as {param.dtype.name}, but got a {tensor.dtype} tensor")
        return LaminaError(
            f"kernel {self.name} reads {param.numel} contiguous elements of {param.name}, "
            f"but got a tensor of shape {tuple(tensor.shape)} (contiguous: {tensor.is_contiguous()})"
        )

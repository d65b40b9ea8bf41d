"""Host microseconds of each piece of one lamina kernel launch, on the GPU: a whole compiled call of
one kernel, ``LaunchableKernel`` alone, and the PyTorch and driver calls a launch makes.

    python experiments/launch_overhead/launch_pieces.py
"""
import ctypes
import statistics
import time

import torch

import lamina
from lamina.backends.cuda.backend import CudaBackend
from lamina.backends.cuda.driver import LaunchableKernel, _driver


def per_call_us(fn, n: int = 200, rounds: int = 15) -> float:
    """Median over ``rounds`` of the host time of ``n`` calls, divided by ``n`` (fewer calls than the
    launch queue holds, so that no call waits for the GPU)."""
    out = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - start) / n * 1e6)
    torch.cuda.synchronize()
    return statistics.median(out)


def main() -> None:
    x = torch.randn(1024, device="cuda")
    compiled = lamina.compile(lambda x: x * 2.0 + 1.0, (x,))
    kernel = compiled.compilation.kernels.kernels[0]
    launchable = LaunchableKernel(kernel, CudaBackend().compile(compiled.compilation.kernels, "sm_90")[kernel.name])
    launchable.prepare()
    buffers = {p.name: torch.empty(1024, device="cuda") for p in kernel.params}
    buffers[kernel.params[0].name] = x
    driver = _driver()
    function = launchable._functions[torch.cuda.current_device()]
    stream = torch.cuda.current_stream().cuda_stream
    pointers = (ctypes.c_void_p * len(kernel.params))(*(buffers[p.name].data_ptr() for p in kernel.params))
    slots = (ctypes.c_void_p * len(kernel.params))(
        *(ctypes.addressof(pointers) + i * ctypes.sizeof(ctypes.c_void_p) for i in range(len(kernel.params))))
    grid, block = launchable.grid, launchable.block
    pieces = {
        "lamina.compile'd call of one kernel": lambda: compiled(x),
        "LaunchableKernel(buffers)": lambda: launchable(buffers),
        "cuLaunchKernel through cuda-python": lambda: driver.cuLaunchKernel(
            function, *grid, *block, 0, stream, ctypes.addressof(slots), 0),
        "torch.cuda.current_stream().cuda_stream": lambda: torch.cuda.current_stream().cuda_stream,
        "torch.cuda.current_device()": torch.cuda.current_device,
        "torch.empty(1024) on the GPU": lambda: torch.empty(1024, device="cuda"),
        "eager x * 2 + 1 (two kernels)": lambda: x * 2.0 + 1.0,
    }
    for name, fn in pieces.items():
        print(f"{name:45s} {per_call_us(fn):6.2f} us")


if __name__ == "__main__":
    main()

"""Runs a compiled program's kernels in order over buffers held as flat tensors.

Both backends share it: they differ only in how one kernel is launched. Outputs are
allocated separately, since they are handed to the caller; temporaries are views into
one arena per call, laid out by the program's memory plan.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from lamina.backends.memory_plan import MemoryPlan, plan_memory
from lamina.core.ir import kernel_ir, loop_ir

Launch = Callable[[kernel_ir.Kernel, dict[str, torch.Tensor]], None]


def torch_dtype(dtype) -> torch.dtype:
    return getattr(torch, dtype.name)


class ProgramRunner:
    """Calls ``launch(kernel, buffers)`` for each kernel; ``buffers`` maps every
    parameter name of the kernel to a flat contiguous tensor on ``device``."""

    def __init__(self, loop: loop_ir.Program, kernels: kernel_ir.Program, launch: Launch, device: torch.device):
        self.loop = loop
        self.kernels = kernels
        self.launch = launch
        self.device = device
        self.memory_plan: MemoryPlan = plan_memory(loop, kernels)

    def _empty(self, buffer: loop_ir.Buffer) -> torch.Tensor:
        return torch.empty(math.prod(buffer.type.shape), dtype=torch_dtype(buffer.type.dtype), device=self.device)

    def __call__(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        buffers: dict[str, torch.Tensor] = {}
        for spec, tensor in zip(self.loop.inputs, inputs):
            buffers[spec.name] = tensor.contiguous().reshape(-1)
        for spec in self.loop.outputs:
            if spec.name not in buffers:
                buffers[spec.name] = self._empty(spec)
        arena = torch.empty(self.memory_plan.arena_bytes, dtype=torch.uint8, device=self.device)
        for name, view in self.memory_plan.views(arena).items():
            buffers.setdefault(name, view)
        for kernel in self.kernels.kernels:
            self.launch(kernel, {p.name: buffers[p.name] for p in kernel.params})
        return [buffers[b.name].reshape(b.type.shape) for b in self.loop.outputs]

"""Runs a compiled program's kernels in order over buffers held as flat tensors.

Both backends share it: they differ only in how one kernel is launched. Each buffer the
program writes is allocated right before its first kernel and, unless it is an output,
dropped right after its last (the program's memory plan), so that the device allocator
reuses its bytes the way it does for eager PyTorch. A kernel's scratch parameters
(``kernel_ir.Param.scratch``) are allocated for each of its launches; those it needs zeroed (the
counters of the blocks that finished, which the last to finish reads) are carved out of one
buffer zeroed once per call, so that a program whose every layer counts its blocks (a decoding
step's attention) fills memory once rather than once per layer: in a CUDA graph each fill is a
node of its own on the GPU.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from lamina.core.ir import kernel_ir, loop_ir, sizes
from lamina.runtime.memory_plan import MemoryPlan, plan_memory

Launch = Callable[[kernel_ir.Kernel, dict[str, torch.Tensor], dict[str, int]], None]
"""Runs one kernel over its buffers, with the value of each size known only at run time."""


def torch_dtype(dtype) -> torch.dtype:
    return getattr(torch, dtype.name)


INPUT_ALIGNMENT = 16
"""Bytes every buffer's first element is aligned to: kernels read it with vector accesses this wide."""
SHARED_ZEROED_BYTES = 1 << 20
"""Zeroed scratch of at most this many bytes a launch shares the call's one zeroed buffer; larger
scratch is allocated and zeroed for its launch alone, so that the call does not hold it all at once."""


def aligned(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``, or a copy of it where it is a view that starts off the alignment."""
    return tensor if tensor.data_ptr() % INPUT_ALIGNMENT == 0 else tensor.clone()


class ProgramRunner:
    """Calls ``launch(kernel, buffers)`` for each kernel; ``buffers`` maps every
    parameter name of the kernel to a flat contiguous tensor on ``device``.

    With ``poison``, every floating-point buffer the program writes starts as NaN, so that
    a kernel that uses an element no kernel wrote (a writer may skip those that no reader
    uses, ``loop_ir.Buffer.unread``) gives NaN rather than whatever the memory held.
    """

    def __init__(self, loop: loop_ir.Program, kernels: kernel_ir.Program, launch: Launch, device: torch.device,
                 poison: bool = False):
        self.loop = loop
        self.kernels = kernels
        self.launch = launch
        self.device = device
        self.poison = poison
        self.memory_plan = plan_memory(loop, kernels)
        self._symbolic = any(sizes.is_symbolic(b.type.shape) for b in loop.inputs + loop.outputs + loop.temporaries)
        read = {p.name for kernel in kernels.kernels for p in kernel.params}
        # inputs that no kernel reads (a size passed as a tensor of that length) are never copied
        self._unread = frozenset(b.name for b in loop.inputs if b.name not in read)

    @property
    def memory_plan(self) -> MemoryPlan:
        return self._plan

    @memory_plan.setter
    def memory_plan(self, plan: MemoryPlan) -> None:
        """The plan, and what it allocates before and releases after each kernel, looked up once:
        a model's prompt step runs hundreds of kernels without a CUDA graph."""
        self._plan = plan
        positions = range(len(self.kernels.kernels))
        self._allocated = [plan.allocated_before(k) for k in positions]
        self._released = [plan.released_after(k) for k in positions]
        self._zeroed = [(k, p) for k, kernel in enumerate(self.kernels.kernels) for p in kernel.params
                        if p.scratch and p.zeroed]

    def _empty(self, buffer: loop_ir.Buffer, values: dict[str, int]) -> torch.Tensor:
        """A flat view of a new tensor of the buffer's shape, which ``_shaped`` gives back as an output."""
        dtype = torch_dtype(buffer.type.dtype)
        shape = sizes.evaluate_shape(buffer.type.shape, values) if values else buffer.type.shape
        if self.poison and dtype.is_floating_point:
            return torch.full(shape, math.nan, dtype=dtype, device=self.device).view(-1)
        return torch.empty(shape, dtype=dtype, device=self.device).view(-1)

    def _scratch(self, param: kernel_ir.Param, values: dict[str, int]) -> torch.Tensor:
        """A kernel's own working memory, new for each launch (two calls running at once on
        different streams never share it): zeroed, or where the kernel writes before it reads,
        left as it is (NaN with ``poison``)."""
        dtype = torch_dtype(param.dtype)
        numel = sizes.evaluate(param.numel, values) if values else param.numel
        if param.zeroed:
            return torch.zeros(numel, dtype=dtype, device=self.device)
        if self.poison and dtype.is_floating_point:
            return torch.full((numel,), math.nan, dtype=dtype, device=self.device)
        return torch.empty(numel, dtype=dtype, device=self.device)

    def _zeroed_scratch(self, values: dict[str, int]) -> dict[tuple[int, str], torch.Tensor]:
        """Each launch's zeroed scratch of at most ``SHARED_ZEROED_BYTES``, by kernel position and
        parameter: disjoint pieces, each aligned, of one buffer zeroed once."""
        pieces, total = [], 0
        for k, param in self._zeroed:
            dtype = torch_dtype(param.dtype)
            nbytes = (sizes.evaluate(param.numel, values) if values else param.numel) * dtype.itemsize
            if nbytes <= SHARED_ZEROED_BYTES:
                pieces.append((k, param.name, dtype, total, nbytes))
                total += -(-nbytes // INPUT_ALIGNMENT) * INPUT_ALIGNMENT
        if not pieces:
            return {}
        shared = torch.zeros(total, dtype=torch.uint8, device=self.device)
        return {(k, name): shared[start:start + nbytes].view(dtype) for k, name, dtype, start, nbytes in pieces}

    def __call__(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        values = self.sizes_of(inputs)
        buffers: dict[str, torch.Tensor] = {}
        for spec, tensor in zip(self.loop.inputs, inputs):
            if spec.name not in self._unread:
                buffers[spec.name] = aligned(tensor.contiguous().reshape(-1))
        zeroed = self._zeroed_scratch(values) if self._zeroed else {}
        for k, (kernel, allocated, released) in enumerate(zip(self.kernels.kernels, self._allocated, self._released)):
            for spec in allocated:
                buffers[spec.name] = self._empty(spec, values)
            self.launch(kernel, self._arguments(k, kernel, buffers, zeroed, values), values)
            for name in released:
                del buffers[name]
        # An output of no elements has no kernel to write it, and so no buffer yet.
        return [_shaped(buffers[b.name] if b.name in buffers else self._empty(b, values),
                        sizes.evaluate_shape(b.type.shape, values) if values else b.type.shape)
                for b in self.loop.outputs]

    def _arguments(self, k: int, kernel: kernel_ir.Kernel, buffers: dict[str, torch.Tensor],
                   zeroed: dict[tuple[int, str], torch.Tensor], values: dict[str, int]) -> dict[str, torch.Tensor]:
        """The tensor of each of the ``k``-th kernel's parameters. Held only while it launches: a buffer
        released after its last kernel must be free before the next kernel's buffers are allocated,
        or the peak holds one dead buffer more than the plan."""
        arguments = {p.name: buffers[p.name] for p in kernel.params if not p.scratch}
        for p in kernel.params:
            if p.scratch:
                arguments[p.name] = zeroed[k, p.name] if (k, p.name) in zeroed else self._scratch(p, values)
        return arguments

    def sizes_of(self, inputs: tuple[torch.Tensor, ...]) -> dict[str, int]:
        """The value of each size known only at run time, from the shapes of ``inputs``; an
        ``InputMismatchError`` where the inputs disagree with the program or with each other."""
        if not self._symbolic:
            return {}
        return sizes.bind([(b.name, b.type.shape) for b in self.loop.inputs], [tuple(t.shape) for t in inputs])


def _shaped(flat: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """An output buffer in its shape: the tensor it was allocated as where it was (an output is
    then no view, as eager's are not), else a view of it."""
    base = flat._base
    if base is not None and tuple(base.shape) == tuple(shape) and base.dtype == flat.dtype and base.is_contiguous():
        return base
    return flat.reshape(shape)

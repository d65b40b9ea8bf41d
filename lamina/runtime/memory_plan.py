"""When each buffer a compiled program writes exists: from its first kernel to its last.

Kernels run one after another (on the CPU, or in order on one CUDA stream). A buffer
the program writes, temporary or output, is allocated just before the first kernel
that touches it; a temporary is released right after the last one. PyTorch's caching
allocator then hands the released bytes to the next allocation, as it does between
the ops of an eager forward pass, so the peak follows the live set: a model's logits
are not allocated while its layers still hold their activations, and the attention
scores of one layer are gone before the next layer needs memory.
"""

from __future__ import annotations

import math

import attrs

from lamina.core.ir import kernel_ir, loop_ir


@attrs.frozen
class Lifetime:
    """``buffer`` exists from before kernel ``first`` through kernel ``last``; outputs live on after the call."""

    buffer: loop_ir.Buffer
    first: int
    last: int
    output: bool = False

    @property
    def nbytes(self) -> int:
        return math.prod(self.buffer.type.shape) * self.buffer.type.dtype.itemsize

    def live_at(self, position: int) -> bool:
        return self.first <= position and (self.output or position <= self.last)


@attrs.frozen
class MemoryPlan:
    """The lifetimes of every buffer a program writes, in launch order."""

    lifetimes: tuple[Lifetime, ...] = attrs.field(converter=tuple)
    kernel_count: int

    @property
    def total_bytes(self) -> int:
        """What the buffers would take if every one lived for the whole call."""
        return sum(t.nbytes for t in self.lifetimes)

    @property
    def peak_bytes(self) -> int:
        """The most bytes live at once, during any kernel."""
        return max((self.live_bytes(k) for k in range(self.kernel_count)), default=0)

    def live_bytes(self, position: int) -> int:
        return sum(t.nbytes for t in self.lifetimes if t.live_at(position))

    def lifetime(self, name: str) -> Lifetime:
        for t in self.lifetimes:
            if t.buffer.name == name:
                return t
        raise KeyError(name)

    def allocated_before(self, position: int) -> tuple[loop_ir.Buffer, ...]:
        return tuple(t.buffer for t in self.lifetimes if t.first == position)

    def released_after(self, position: int) -> tuple[str, ...]:
        return tuple(t.buffer.name for t in self.lifetimes if not t.output and t.last == position)

    def __str__(self) -> str:
        temporaries = sum(1 for t in self.lifetimes if not t.output)
        lines = [f"memory plan: {temporaries} temporaries and {len(self.lifetimes) - temporaries} outputs, "
                 f"at most {_size(self.peak_bytes)} live at once (all at once {_size(self.total_bytes)})"]
        for t in self.lifetimes:
            until = "returned" if t.output else f"released after kernel {t.last}"
            lines.append(f"  {t.buffer.name}: {t.buffer.type}  {_size(t.nbytes)}  from kernel {t.first}, {until}")
        return "\n".join(lines)


def plan_memory(loop: loop_ir.Program, kernels: kernel_ir.Program) -> MemoryPlan:
    """The lifetimes of ``loop``'s temporaries and outputs over the launch order of ``kernels``.

    An input is not planned, nor a buffer no kernel touches (a dead temporary): the runner hands
    inputs through, an input that the program updates in place being its own output.
    """
    inputs = {b.name for b in loop.inputs}
    outputs = {b.name for b in loop.outputs}
    uses: dict[str, list[int]] = {}
    for position, kernel in enumerate(kernels.kernels):
        for param in kernel.params:
            uses.setdefault(param.name, []).append(position)
    lifetimes = []
    for buffer in _unique(loop.temporaries + loop.outputs):
        if buffer.name in inputs or buffer.name not in uses:
            continue
        touched = uses[buffer.name]
        lifetimes.append(Lifetime(buffer, min(touched), max(touched), output=buffer.name in outputs))
    lifetimes.sort(key=lambda t: (t.first, t.buffer.name))
    return MemoryPlan(lifetimes, len(kernels.kernels))


def _unique(buffers: tuple[loop_ir.Buffer, ...]) -> list[loop_ir.Buffer]:
    seen: dict[str, loop_ir.Buffer] = {}
    for b in buffers:
        seen.setdefault(b.name, b)
    return list(seen.values())


def _size(nbytes: int) -> str:
    if nbytes < 1024:
        return f"{nbytes} B"
    if nbytes < 1024 ** 2:
        return f"{nbytes / 1024:.1f} KiB"
    return f"{nbytes / 1024 ** 2:.1f} MiB"

"""What a pointwise kernel is expected to cost: the time to move its bytes, plus a launch.

A pointwise kernel does a few operations per element, far below what the GPU computes
in the time its memory delivers the element, so only bytes count: every input read
once (a broadcast operand is small and stays in the cache), every output written once,
at a fraction of the device's copy bandwidth. That fraction is what well-written
elementwise kernels hold on large tensors with 16-byte accesses; with one element per
access, more instructions per byte keep the memory system less busy.
"""

from __future__ import annotations

import math

from lamina.core.ir import loop_ir
from lamina.core.target import Target

VECTOR_EFFICIENCY = 0.9
"""Fraction of the copy bandwidth reached with vector accesses."""
SCALAR_EFFICIENCY = 0.7
"""Fraction of the copy bandwidth reached with one element per access."""


def bytes_moved(kernel: loop_ir.Kernel) -> int:
    """Every input read once and every output written once."""
    return sum(math.prod(b.type.shape) * b.type.dtype.itemsize for b in kernel.inputs + kernel.outputs)


def estimate_microseconds(kernel: loop_ir.Kernel, target: Target, vector_width: int) -> float:
    efficiency = VECTOR_EFFICIENCY if vector_width > 1 else SCALAR_EFFICIENCY
    return bytes_moved(kernel) / (target.memory_bytes_per_us * efficiency) + target.launch_us

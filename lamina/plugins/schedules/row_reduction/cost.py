"""What a row-reduction kernel is expected to cost: it is bound by memory bandwidth.

The kernel reads each input once and writes each output once; a row that does not stay
in registers is read again by every loop over it. The time is those bytes at
``EFFICIENCY`` of the target's bandwidth, plus the launch. The flops (a few per element)
hide under the memory traffic and are not counted.
"""

from __future__ import annotations

import math

from lamina.core.ir import loop_ir
from lamina.core.target import Target
from lamina.plugins.schedules.row_reduction.recognise import analyse
from lamina.plugins.schedules.row_reduction.tiling import decide

EFFICIENCY = 0.8
"""Fraction of the copy bandwidth a row reduction holds: the best kernels reach about 90% for
rows of 4k and more; shorter rows pay relatively more for the combining step between passes."""


def moved_bytes(kernel: loop_ir.Kernel, target: Target) -> int:
    """Bytes read and written by the kernel the schedule makes of ``kernel`` with its default decisions."""
    row = analyse(kernel)
    decisions = decide(row, target, {})
    rereads: dict[str, int] = {}
    if not decisions.row_in_registers:
        for (buffer, _, _), readers in row.readers.items():
            rereads[buffer] = max(rereads.get(buffer, 0), readers - 1)
    total = 0
    for b in kernel.inputs + kernel.outputs:
        size = math.prod(b.type.shape) * b.type.dtype.itemsize
        total += size * (1 + rereads.get(b.name, 0))
    return total


def estimate_cost(kernel: loop_ir.Kernel, target: Target) -> float:
    """Estimated microseconds for one launch on ``target``."""
    return moved_bytes(kernel, target) / (target.memory_bytes_per_us * EFFICIENCY) + target.launch_us

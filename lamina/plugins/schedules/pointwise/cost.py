"""What a pointwise kernel is expected to cost: the time to move its bytes, plus a launch.

A pointwise kernel does a few operations per element, far below what the GPU computes
in the time its memory delivers the element, so only bytes count: every input read
once (a broadcast operand is small and stays in the cache), every output written once,
at a fraction of the device's copy bandwidth. That fraction is what well-written
elementwise kernels hold on large tensors with 16-byte accesses; with one element per
access, more instructions per byte keep the memory system less busy. A buffer read across
its rows (a transposed copy's input: neighbouring threads a row apart) moves a 32-byte
sector for every element it uses.
"""

from __future__ import annotations

from lamina.core.ir import expr as ex, index, loop_ir, sizes
from lamina.core.target import Target
from lamina.plugins.schedules.pointwise.analysis import pointwise_nest

VECTOR_EFFICIENCY = 0.9
"""Fraction of the copy bandwidth reached with vector accesses."""
SCALAR_EFFICIENCY = 0.7
"""Fraction of the copy bandwidth reached with one element per access."""
SECTOR_BYTES = 32
"""What the memory system moves for one element read across rows."""


def bytes_moved(kernel: loop_ir.Kernel) -> int:
    """Every input read once and every output written once."""
    return sum(_bytes(b) for b in kernel.inputs + kernel.outputs)


def read_across_rows(kernel: loop_ir.Kernel) -> dict[str, loop_ir.Buffer]:
    """The input buffers that the innermost loop walks more than one element at a step, by name."""
    nest = pointwise_nest(kernel)
    if nest is None:
        return {}
    across = set()
    for store in nest.stores:
        for load in ex.walk(store.value):
            if isinstance(load, loop_ir.Load) and nest.inner_extent != 1:
                offset = index.linearize(load.index, kernel.buffer(load.buffer).type.shape)
                step = index.coefficient(offset, nest.inner)
                if step is not None and step not in (0, 1):
                    across.add(load.buffer)
    return {b.name: b for b in kernel.inputs if b.name in across}


def estimate_microseconds(kernel: loop_ir.Kernel, target: Target, vector_width: int) -> float:
    efficiency = VECTOR_EFFICIENCY if vector_width > 1 else SCALAR_EFFICIENCY
    across = read_across_rows(kernel).values()
    across_bytes = sum(_bytes(b) for b in across)
    sectors = sum(_bytes(b) * SECTOR_BYTES // b.type.dtype.itemsize for b in across)
    return ((bytes_moved(kernel) - across_bytes) / (target.memory_bytes_per_us * efficiency)
            + sectors / target.memory_bytes_per_us + target.launch_us)


def _bytes(buffer: loop_ir.Buffer) -> int:
    """A buffer's bytes, a size known only at run time taken at its hint."""
    return sizes.hint(sizes.numel(buffer.type.shape)) * buffer.type.dtype.itemsize

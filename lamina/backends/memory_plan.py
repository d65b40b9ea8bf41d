"""Where each temporary buffer of a compiled program lives in one per-call arena.

A temporary is live from the first kernel that touches it to the last one that does.
Kernels run one after another (on the CPU, or in order on one CUDA stream), so two
temporaries whose live ranges do not overlap may share bytes. Placement is greedy by
size: the largest temporary first, each at the lowest 256-byte aligned offset that no
already placed, simultaneously live temporary occupies. The plan is computed once per
compiled program; each call allocates the arena once and views its slices.
"""

from __future__ import annotations

import math

import attrs
import torch

from lamina.core.ir import kernel_ir, loop_ir

ALIGNMENT = 256
"""Byte alignment of every buffer in the arena: what CUDA's allocator guarantees, and
enough for any vectorised access a kernel makes."""


@attrs.frozen
class Placement:
    """Temporary ``buffer`` at ``offset`` bytes into the arena, live in kernels ``first`` through ``last``."""

    buffer: loop_ir.Buffer
    offset: int
    nbytes: int
    first: int
    last: int

    @property
    def end(self) -> int:
        return self.offset + _aligned(self.nbytes)

    def overlaps_in_time(self, other: "Placement") -> bool:
        return self.first <= other.last and other.first <= self.last


@attrs.frozen
class MemoryPlan:
    """The arena of one compiled program: its size and where each temporary sits in it."""

    placements: tuple[Placement, ...] = attrs.field(converter=tuple)
    arena_bytes: int

    @property
    def temporary_bytes(self) -> int:
        """What the temporaries would take as separate allocations (each rounded to the alignment)."""
        return sum(_aligned(p.nbytes) for p in self.placements)

    def placement(self, name: str) -> Placement:
        for p in self.placements:
            if p.buffer.name == name:
                return p
        raise KeyError(name)

    def views(self, arena: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every temporary as a flat tensor of its dtype over its bytes of ``arena`` (uint8)."""
        views = {}
        for p in self.placements:
            dtype = getattr(torch, p.buffer.type.dtype.name)
            views[p.buffer.name] = arena[p.offset:p.offset + p.nbytes].view(dtype)
        return views

    def __str__(self) -> str:
        lines = [f"memory plan: {len(self.placements)} temporaries in an arena of {_size(self.arena_bytes)} "
                 f"(separately {_size(self.temporary_bytes)})"]
        for p in sorted(self.placements, key=lambda p: (p.offset, p.first)):
            lines.append(f"  {p.buffer.name}: {p.buffer.type}  bytes [{p.offset}, {p.offset + p.nbytes})  "
                         f"kernels {p.first}..{p.last}")
        return "\n".join(lines)


def plan_memory(loop: loop_ir.Program, kernels: kernel_ir.Program) -> MemoryPlan:
    """Place the temporaries of ``loop`` by their live ranges over the launch order of ``kernels``."""
    named = {b.name for b in loop.inputs + loop.outputs}
    temporaries = [b for b in loop.temporaries if b.name not in named]
    uses: dict[str, list[int]] = {b.name: [] for b in temporaries}
    for position, kernel in enumerate(kernels.kernels):
        for param in kernel.params:
            if param.name in uses:
                uses[param.name].append(position)
    placed: list[Placement] = []
    order = sorted(temporaries, key=lambda b: (-_nbytes(b), b.name))
    for buffer in order:
        touched = uses[buffer.name] or [0]
        candidate = Placement(buffer, 0, _nbytes(buffer), min(touched), max(touched))
        placed.append(attrs.evolve(candidate, offset=_lowest_free_offset(candidate, placed)))
    arena = max((p.end for p in placed), default=0)
    return MemoryPlan(sorted(placed, key=lambda p: (p.first, p.buffer.name)), arena)


def _lowest_free_offset(candidate: Placement, placed: list[Placement]) -> int:
    size = _aligned(candidate.nbytes)
    offset = 0
    for other in sorted((p for p in placed if p.overlaps_in_time(candidate)), key=lambda p: p.offset):
        if offset + size <= other.offset:
            break
        offset = max(offset, other.end)
    return offset


def _nbytes(buffer: loop_ir.Buffer) -> int:
    return math.prod(buffer.type.shape) * buffer.type.dtype.itemsize


def _aligned(nbytes: int) -> int:
    return max(ALIGNMENT, -(-nbytes // ALIGNMENT) * ALIGNMENT)


def _size(nbytes: int) -> str:
    if nbytes < 1024:
        return f"{nbytes} B"
    if nbytes < 1024 ** 2:
        return f"{nbytes / 1024:.1f} KiB"
    return f"{nbytes / 1024 ** 2:.1f} MiB"

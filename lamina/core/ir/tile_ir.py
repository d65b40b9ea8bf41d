"""Tile IR: a schedule applied to one Loop IR kernel, every decision spelled out.

It says which loops bind to blocks and threads and how many iterations each thread
owns (its register tile), how reduction loops are split and combined, which operands
are staged in shared memory (tile shape, layout, padding against bank conflicts,
number of buffers, copy mechanism) and how wide memory accesses are; a schedule's own
decisions beyond these (how threads form warps, where products run, ...) travel in a record
the schedule defines (``ScheduleSettings``). It is still written without CUDA syntax: the
schedule's lowering turns it into Kernel IR.
"""

from __future__ import annotations

import math

import attrs

from lamina.core.errors import VerificationError
from lamina.core.ir import loop_ir, sizes
from lamina.core.ir.dtypes import DType
from lamina.core.ir.expr import Expr

BLOCK_DIMS = ("x", "y", "z")
REDUCTION_STRATEGIES = ("serial", "warp_shuffle", "block_tree", "split_k", "last_block")
COPY_KINDS = ("load_store", "cp.async", "tma")


@attrs.frozen
class AxisBinding:
    """Parallel loops ``vars`` (flattened row-major when several) split over the grid.

    One block covers ``threads * per_thread`` iterations, ``per_thread`` of them in each
    thread's registers (``contiguous``: a thread's iterations are adjacent; otherwise
    they come in runs of ``group`` adjacent ones, ``threads * group`` apart, so that one
    wide access can read a run).
    """

    vars: tuple[str, ...] = attrs.field(converter=tuple)
    extent: "int | Expr"
    block_dim: str
    threads: int
    per_thread: int = 1
    thread_dim: str = "x"
    contiguous: bool = True
    group: int = 1

    @property
    def block_tile(self) -> int:
        return self.threads * self.per_thread

    @property
    def blocks(self) -> "int | Expr":
        if sizes.is_symbolic(self.extent):
            return sizes.blocks(self.extent, self.block_tile)
        return math.ceil(self.extent / self.block_tile)


@attrs.frozen
class ReductionPlan:
    """How the reduction loops ``vars`` run: serially in steps of ``step`` (a k-tile),
    or split across lanes, warps or blocks; ``cluster_blocks`` blocks along x, launched
    together as a cluster, each reduce their part and combine them."""

    vars: tuple[str, ...] = attrs.field(converter=tuple)
    extent: int
    strategy: str = "serial"
    step: int = 1
    splits: int = 1
    cluster_blocks: int = 1


@attrs.frozen
class SharedStage:
    """Stage tiles of ``buffer`` (read as ``buffer[index]`` in the loop kernel) in shared memory.

    ``dims`` names the loop variable along each tile dimension, outermost first;
    ``tile`` is the logical tile shape and ``padding`` the elements added to each row
    of the innermost dimension against bank conflicts. ``swizzle`` (128): the rows are
    stored in the 128-byte swizzle that Hopper's wgmma reads (``kernel_ir.Array.swizzle``)
    instead of padded.
    """

    buffer: str
    index: str
    dims: tuple[str, ...] = attrs.field(converter=tuple)
    tile: tuple[int, ...] = attrs.field(converter=tuple)
    dtype: DType
    padding: int = 0
    buffers: int = 1
    copy: str = "load_store"
    copy_bytes: int = 4
    swizzle: int = 0

    @property
    def padded_shape(self) -> tuple[int, ...]:
        return (self.buffers,) + self.tile[:-1] + (self.tile[-1] + self.padding,)

    @property
    def bytes(self) -> int:
        return math.prod(self.padded_shape) * self.dtype.itemsize


class ScheduleSettings:
    """A schedule's own decisions beyond the fields every schedule shares, carried by
    ``TileKernel.settings``: the schedule subclasses this (an attrs class) and answers the
    few questions that the core asks of any Tile IR, so that the core knows no schedule."""

    def blocks_along_x(self, tk: TileKernel) -> int:
        """How many blocks along x the grid holds for each block that the bindings give."""
        return 1

    def shared_bytes(self, tk: TileKernel) -> int:
        """Shared memory that the block uses beyond its staged tiles."""
        return 0

    def extra_threads(self, tk: TileKernel) -> int:
        """Threads of the block beyond those the bindings give (a warpgroup that only issues copies)."""
        return 0

    def reduction_text(self, tk: TileKernel) -> str:
        """What the printed reduction line adds (``, ...``), or nothing."""
        return ""

    def lines(self, tk: TileKernel) -> list[str]:
        """The printed lines of these settings, before the knobs."""
        return []

    def problems(self, tk: TileKernel) -> list[str]:
        """How the Tile IR breaks what these settings need."""
        return []


@attrs.frozen
class TileKernel:
    """A loop kernel's schedule; ``settings``: the schedule's own decisions, if it has any
    beyond these fields (``ScheduleSettings``)."""

    kernel: loop_ir.Kernel
    schedule: str
    grid: tuple[AxisBinding, ...] = attrs.field(converter=tuple)
    reduction: ReductionPlan | None = None
    stages: tuple[SharedStage, ...] = attrs.field(converter=tuple, default=())
    vector_width: int = 1
    knobs: tuple[tuple[str, object], ...] = attrs.field(converter=tuple, default=())
    settings: ScheduleSettings | None = None

    @property
    def threads_per_block(self) -> int:
        return math.prod(b.threads for b in self.grid) * (
            self.reduction.splits if self.reduction and self.reduction.strategy in ("warp_shuffle", "block_tree") else 1
        ) + (self.settings.extra_threads(self) if self.settings is not None else 0)

    @property
    def shared_bytes(self) -> int:
        """The staged tiles, and whatever else the schedule's settings keep in shared memory."""
        staged = sum(s.bytes for s in self.stages)
        return staged + (self.settings.shared_bytes(self) if self.settings is not None else 0)

    def grid_shape(self) -> dict[str, "int | Expr"]:
        shape = {d: 1 for d in BLOCK_DIMS}
        for b in self.grid:
            shape[b.block_dim] *= b.blocks
        if self.reduction and self.reduction.strategy == "split_k":
            shape["z"] *= self.reduction.splits
        if self.reduction:
            shape["x"] *= self.reduction.cluster_blocks
        if self.settings is not None:
            shape["x"] *= self.settings.blocks_along_x(self)
        return shape


def format_tile_kernel(tk: TileKernel) -> str:
    k = tk.kernel
    lines = [f"tile {k.name}  schedule={tk.schedule}"]
    grid = tk.grid_shape()
    lines.append(
        f"  grid ({grid['x']}, {grid['y']}, {grid['z']}) blocks of {tk.threads_per_block} threads"
        + (f", {tk.shared_bytes} B shared" if tk.stages else "")
    )
    for b in tk.grid:
        names = " * ".join(b.vars)
        if b.contiguous:
            owner = "contiguous"
        elif b.group > 1:
            owner = f"grouped by {b.group}, groups {b.threads * b.group} apart"
        else:
            owner = f"strided by {b.threads}"
        lines.append(
            f"  parallel {names} ({b.extent}): block.{b.block_dim} tile {b.block_tile}"
            f" = thread.{b.thread_dim} {b.threads} x {b.per_thread} per thread ({owner})"
        )
    if tk.reduction:
        r = tk.reduction
        text = f"  reduce {' * '.join(r.vars)} ({r.extent}): {r.strategy}"
        if r.step > 1:
            text += f", step {r.step}"
        if r.splits > 1:
            text += f", {r.splits} splits"
        if r.cluster_blocks > 1:
            text += f", across a cluster of {r.cluster_blocks} blocks along x"
        if tk.settings is not None:
            text += tk.settings.reduction_text(tk)
        lines.append(text)
    for s in tk.stages:
        dims = "][".join(f"{d} {n}" for d, n in zip(s.dims, s.tile))
        pad = f" + pad {s.padding}" if s.padding else (f", {s.swizzle}-byte swizzle" if s.swizzle else ", no pad")
        lines.append(
            f"  shared {s.index} as {s.dtype}[{dims}{pad}], {s.buffers} buffer{'s' if s.buffers > 1 else ''},"
            f" copy {s.copy} {s.copy_bytes} B"
        )
    if tk.vector_width > 1:
        lines.append(f"  vector width {tk.vector_width}")
    if tk.settings is not None:
        lines += tk.settings.lines(tk)
    for key, value in tk.knobs:
        lines.append(f"  {key} = {value}")
    return "\n".join(lines)


def verify_tile_kernel(tk: TileKernel, max_threads: int = 1024, max_shared_bytes: int = 48 * 1024) -> None:
    problems = []
    loops = {s.var: s for s in loop_ir.statements(tk.kernel.body) if isinstance(s, loop_ir.Loop)}
    for b in tk.grid:
        for v in b.vars:
            if v not in loops or loops[v].kind != "parallel":
                problems.append(f"grid binding names {v}, which is not a parallel loop of the kernel")
        if b.block_dim not in BLOCK_DIMS or b.thread_dim not in BLOCK_DIMS:
            problems.append(f"binding of {b.vars} uses an unknown dimension")
    if tk.reduction:
        if tk.reduction.strategy not in REDUCTION_STRATEGIES:
            problems.append(f"unknown reduction strategy {tk.reduction.strategy}")
        for v in tk.reduction.vars:
            if v not in loops or loops[v].kind != "reduce":
                problems.append(f"reduction plan names {v}, which is not a reduce loop of the kernel")
    for s in tk.stages:
        if s.copy not in COPY_KINDS:
            problems.append(f"shared stage of {s.buffer} uses unknown copy {s.copy}")
    if tk.settings is not None:
        problems += tk.settings.problems(tk)
    if tk.threads_per_block > max_threads:
        problems.append(f"{tk.threads_per_block} threads per block exceed the limit of {max_threads}")
    if tk.shared_bytes > max_shared_bytes:
        problems.append(f"{tk.shared_bytes} B of shared memory exceed the limit of {max_shared_bytes} B")
    if problems:
        raise VerificationError(f"Tile IR of {tk.kernel.name} is inconsistent:\n  " + "\n  ".join(problems))

"""Tile IR: a schedule applied to one Loop IR kernel, every decision spelled out.

It says which loops bind to blocks and threads and how many iterations each thread
owns (its register tile), how reduction loops are split and combined, which operands
are staged in shared memory (tile shape, layout, padding against bank conflicts,
number of buffers, copy mechanism), how wide memory accesses are, and how threads form
warps and blocks follow one another. It is still written without CUDA syntax: the
schedule's lowering turns it into Kernel IR.
"""

from __future__ import annotations

import math

import attrs

from lamina.core.errors import VerificationError
from lamina.core.ir import loop_ir
from lamina.core.ir.dtypes import DType
from lamina.core.ir.kernel_ir import SWIZZLE_BYTES, WARP_SIZE

BLOCK_DIMS = ("x", "y", "z")
REDUCTION_STRATEGIES = ("serial", "warp_shuffle", "block_tree", "split_k", "last_block")
COPY_KINDS = ("load_store", "cp.async")


@attrs.frozen
class AxisBinding:
    """Parallel loops ``vars`` (flattened row-major when several) split over the grid.

    One block covers ``threads * per_thread`` iterations, ``per_thread`` of them in each
    thread's registers (``contiguous``: a thread's iterations are adjacent; otherwise
    they come in runs of ``group`` adjacent ones, ``threads * group`` apart, so that one
    wide access can read a run).
    """

    vars: tuple[str, ...] = attrs.field(converter=tuple)
    extent: int
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
    def blocks(self) -> int:
        return math.ceil(self.extent / self.block_tile)


@attrs.frozen
class ReductionPlan:
    """How the reduction loops ``vars`` run: serially in steps of ``step`` (a k-tile),
    or split across lanes, warps or blocks; ``cluster_blocks`` blocks along x, launched
    together as a cluster, each reduce their part and combine them. With the ``last_block``
    strategy, ``band_blocks`` blocks along x each store their part of a band of rows, and
    the last of them to finish reads the band back and reduces it."""

    vars: tuple[str, ...] = attrs.field(converter=tuple)
    extent: int
    strategy: str = "serial"
    step: int = 1
    splits: int = 1
    cluster_blocks: int = 1
    band_blocks: int = 1


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


@attrs.frozen
class TileKernel:
    """A loop kernel's schedule.

    ``warp_patch`` (rows, columns): each warp is that patch of the block's y by x threads,
    not 32 threads in CUDA's order (x fastest), so that it reads fewer distinct operand
    elements from shared memory. ``grouped_rows``: blocks run down ``grouped_rows`` rows of the grid before
    the next column, not along x first, so that the blocks resident at once share
    operand tiles in L2. ``copy_steps``: the next k-tile's copies into shared memory are
    issued over the first ``copy_steps`` steps of the reduction within each k-tile, a few
    at each, rather than all at once before them (0). ``tensor_cores``: how the products run
    on the tensor cores (``"3xtf32"``: each float32 operand as two tf32 pieces, three
    m16n8k8 mma per product, warps of 8 x 4 threads holding the mma's accumulators;
    ``"wgmma 3xtf32"``: the same pieces, three wgmma m64nNk8 per product by each warpgroup, a
    64-row slice of the block, the rows' operand from registers and the columns' from swizzled
    shared memory), or None for FMAs on the CUDA cores.
    """

    kernel: loop_ir.Kernel
    schedule: str
    grid: tuple[AxisBinding, ...] = attrs.field(converter=tuple)
    reduction: ReductionPlan | None = None
    stages: tuple[SharedStage, ...] = attrs.field(converter=tuple, default=())
    vector_width: int = 1
    knobs: tuple[tuple[str, object], ...] = attrs.field(converter=tuple, default=())
    warp_patch: tuple[int, int] | None = None
    grouped_rows: int = 1
    copy_steps: int = 0
    tensor_cores: str | None = None

    @property
    def threads_per_block(self) -> int:
        return math.prod(b.threads for b in self.grid) * (
            self.reduction.splits if self.reduction and self.reduction.strategy in ("warp_shuffle", "block_tree") else 1
        )

    @property
    def shared_bytes(self) -> int:
        """The staged tiles, and on wgmma two k-tiles of the small tf32 pieces of the operand along
        the columns (the one along the rows, bound to y, is split in registers)."""
        staged = sum(s.bytes for s in self.stages)
        if self.tensor_cores == WGMMA_PRODUCTS:
            columns = _column_stage(self)
            staged += 2 * math.prod(columns.tile) * columns.dtype.itemsize
        return staged

    def grid_shape(self) -> dict[str, int]:
        shape = {d: 1 for d in BLOCK_DIMS}
        for b in self.grid:
            shape[b.block_dim] *= b.blocks
        if self.reduction and self.reduction.strategy == "split_k":
            shape["z"] *= self.reduction.splits
        if self.reduction:
            shape["x"] *= self.reduction.cluster_blocks * self.reduction.band_blocks
        return shape


def _column_stage(tk: TileKernel) -> SharedStage:
    """The staged operand of wgmma products along the columns: the one whose rows are not the
    block's rows (those bound to y)."""
    rows = next((b.vars for b in tk.grid if b.thread_dim == "y"), ())
    return next(s for s in tk.stages if s.dims[0] not in rows)


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
        if r.band_blocks > 1:
            text += f", across {r.band_blocks} blocks along x, the last of a band to finish reducing its rows"
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
    if tk.warp_patch is not None:
        rows, columns = tk.warp_patch
        lines.append(f"  warps of {rows} x {columns} threads (y by x)")
    if tk.grouped_rows > 1:
        lines.append(f"  blocks run down groups of {tk.grouped_rows} grid rows, column by column")
    if tk.copy_steps:
        lines.append(f"  the next k-tile's copies issued over the first {tk.copy_steps} steps of each k-tile")
    if tk.tensor_cores == MMA_PRODUCTS:
        lines.append("  products on tensor cores: mma m16n8k8 on tf32, each f32 operand as big + small tf32, "
                     "3 mma per product")
    if tk.tensor_cores == WGMMA_PRODUCTS:
        columns = _column_stage(tk).tile[0]
        lines.append(f"  products on tensor cores: wgmma m64n{columns}k8 on tf32, each warpgroup 64 rows, each f32 "
                     "operand as big + small tf32: the rows' read from swizzled shared memory into registers and split "
                     "there, the columns' split in place in swizzled shared memory once a k-tile lands; 3 wgmma per "
                     "product summed over each k-tile, then added in f32")
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
        if (tk.reduction.band_blocks > 1) != (tk.reduction.strategy == "last_block"):
            problems.append(f"{tk.reduction.band_blocks} blocks along a band of rows with the "
                            f"{tk.reduction.strategy} strategy: bands of several blocks are the last_block strategy's")
        for v in tk.reduction.vars:
            if v not in loops or loops[v].kind != "reduce":
                problems.append(f"reduction plan names {v}, which is not a reduce loop of the kernel")
    for s in tk.stages:
        if s.copy not in COPY_KINDS:
            problems.append(f"shared stage of {s.buffer} uses unknown copy {s.copy}")
    problems += _arrangement_problems(tk) + _copy_issue_problems(tk) + _tensor_core_problems(tk)
    if tk.threads_per_block > max_threads:
        problems.append(f"{tk.threads_per_block} threads per block exceed the limit of {max_threads}")
    if tk.shared_bytes > max_shared_bytes:
        problems.append(f"{tk.shared_bytes} B of shared memory exceed the limit of {max_shared_bytes} B")
    if problems:
        raise VerificationError(f"Tile IR of {tk.kernel.name} is inconsistent:\n  " + "\n  ".join(problems))


def _arrangement_problems(tk: TileKernel) -> list[str]:
    problems = []
    threads = {d: 1 for d in BLOCK_DIMS}
    for b in tk.grid:
        threads[b.thread_dim] *= b.threads
    if tk.warp_patch is not None:
        rows, columns = tk.warp_patch
        if rows * columns != WARP_SIZE:
            problems.append(f"a warp patch of {rows} x {columns} threads is not {WARP_SIZE} threads")
        elif threads["x"] % columns or threads["y"] % rows:
            problems.append(f"warps of {rows} x {columns} threads do not tile the block's "
                            f"{threads['y']} x {threads['x']} threads")
    if tk.grouped_rows < 1:
        problems.append(f"blocks grouped by {tk.grouped_rows} grid rows: at least 1 is needed")
    return problems


def _copy_issue_problems(tk: TileKernel) -> list[str]:
    if not tk.copy_steps:
        return []
    steps = tk.reduction.step // tk.reduction.splits if tk.reduction else 0
    if not tk.stages or any(s.buffers != 2 for s in tk.stages):
        return [f"copies spread over {tk.copy_steps} steps need operands staged in two buffers"]
    if not 0 < tk.copy_steps <= steps:
        return [f"copies spread over {tk.copy_steps} steps, where a k-tile has {steps}"]
    return []


MMA_WARP = (8, 4)
"""The rows by columns of threads (y by x) of a warp holding m16n8k8 accumulators."""
MMA_PRODUCTS, WGMMA_PRODUCTS = "3xtf32", "wgmma 3xtf32"
WGMMA_ROW = 32
"""Elements of a swizzled float32 row: a k-tile of wgmma products is this deep."""


def _tensor_core_problems(tk: TileKernel) -> list[str]:
    """How the threads and k-tiles of a product's Tile IR fail its tensor-core products. Where
    no binding puts the products' columns along x (a row reduction whose lanes spread them),
    the schedule checks the Tile IR of its products as a contraction instead."""
    if tk.tensor_cores is None:
        return []
    if tk.tensor_cores not in (MMA_PRODUCTS, WGMMA_PRODUCTS):
        return [f"unknown tensor-core products {tk.tensor_cores!r}; the kinds are {MMA_PRODUCTS!r} and "
                f"{WGMMA_PRODUCTS!r}"]
    by_dim = {b.thread_dim: b for b in tk.grid}
    if "x" not in by_dim:
        return []
    problems = _wgmma_problems(tk) if tk.tensor_cores == WGMMA_PRODUCTS else []
    columns, rows = by_dim.get("x"), by_dim.get("y")
    across = min(columns.threads, WARP_SIZE) if columns else WARP_SIZE
    patch = tk.warp_patch or (WARP_SIZE // across, across)
    if patch != MMA_WARP:
        problems.append(f"tensor-core products need warps of {MMA_WARP[0]} x {MMA_WARP[1]} threads, not {patch}")
    if columns is None or rows is None or columns.group != 2 or rows.group != 1 or rows.per_thread % 2:
        problems.append("tensor-core products need each thread's rows in pairs, one by one, and its columns in runs of 2")
    if tk.reduction is None or tk.reduction.splits != 1 or tk.reduction.step % 8:
        problems.append("tensor-core products need whole k-tiles per warp, in steps of 8")
    if tk.copy_steps:
        problems.append(f"tensor-core products issue each k-tile's copies at once, not over {tk.copy_steps} steps")
    return problems


def _wgmma_problems(tk: TileKernel) -> list[str]:
    problems = []
    by_dim = {b.thread_dim: b for b in tk.grid}
    columns, rows = by_dim.get("x"), by_dim.get("y")
    if rows is None or rows.block_tile % 64 or rows.per_thread != 2 or columns is None or columns.threads != 4:
        problems.append("wgmma products need blocks of whole warpgroups of 64 rows, 2 rows and 4 threads across "
                        "per warp's row of threads")
    if tk.reduction is None or tk.reduction.step != WGMMA_ROW:
        problems.append(f"wgmma products take k-tiles of {WGMMA_ROW}: one swizzled row of float32")
    if len(tk.stages) != 2 or any(s.swizzle != SWIZZLE_BYTES or s.tile[-1] != WGMMA_ROW or s.copy != "cp.async"
                                  or s.buffers < 2 for s in tk.stages):
        problems.append("wgmma products read two operands staged K-major by cp.async in the 128-byte swizzle, "
                        "at least two buffers each")
    return problems

"""The contraction schedule's own decisions in its Tile IR: how threads form warps, the order
in which blocks run, when the next k-tile's copies are issued, and where the products run.

They travel in ``TileKernel.settings``; the core prints and checks them through the
``ScheduleSettings`` questions, knowing nothing of contractions.
"""

from __future__ import annotations

import math

import attrs

from lamina.core.ir import tile_ir
from lamina.core.ir.kernel_ir import SWIZZLE_BYTES, WARP_SIZE

MMA_WARP = (8, 4)
"""The rows by columns of threads (y by x) of a warp holding m16n8k8 accumulators."""
MMA_PRODUCTS, WGMMA_PRODUCTS, WGMMA_16_BIT_PRODUCTS = "3xtf32", "wgmma 3xtf32", "wgmma 16-bit"


@attrs.frozen
class ContractionSettings(tile_ir.ScheduleSettings):
    """``warp_patch`` (rows, columns): each warp is that patch of the block's y by x threads,
    not 32 threads in CUDA's order (x fastest), so that it reads fewer distinct operand
    elements from shared memory. ``grouped_rows``: blocks run down ``grouped_rows`` rows of the
    grid before the next column, not along x first, so that the blocks resident at once share
    operand tiles in L2. ``copy_steps``: the next k-tile's copies into shared memory are issued
    over the first ``copy_steps`` steps of the reduction within each k-tile, a few at each,
    rather than all at once before them (0). ``products``: how the products run on the tensor
    cores (``MMA_PRODUCTS``: each float32 operand as two tf32 pieces, three m16n8k8 mma per
    product, warps of 8 x 4 threads holding the mma's accumulators; ``WGMMA_PRODUCTS``: the
    same pieces, three wgmma m64nNk8 per product by each warpgroup, a 64-row slice of the
    block, the rows' operand from registers and the columns' from swizzled shared memory;
    ``WGMMA_16_BIT_PRODUCTS``: bf16 or fp16 operands as they are, one wgmma m64nNk16 per 16 k,
    both from swizzled shared memory), or None for FMAs on the CUDA cores."""

    warp_patch: tuple[int, int] | None = None
    grouped_rows: int = 1
    copy_steps: int = 0
    products: str | None = None
    batch_rows: int = 1
    """Where the blocks run down groups of rows: the batch entries whose block rows count as one
    column of rows (``arrangement.batch_as_rows``), B being the same for each."""

    def shared_bytes(self, tk: tile_ir.TileKernel) -> int:
        """On wgmma, two k-tiles of the small tf32 pieces of the operand along the columns (the
        one along the rows, bound to y, is split in registers)."""
        if self.products != WGMMA_PRODUCTS:
            return 0
        columns = column_stage(tk)
        return 2 * math.prod(columns.tile) * columns.dtype.itemsize

    def lines(self, tk: tile_ir.TileKernel) -> list[str]:
        lines = []
        if self.warp_patch is not None:
            rows, columns = self.warp_patch
            lines.append(f"  warps of {rows} x {columns} threads (y by x)")
        if self.grouped_rows > 1:
            lines.append(f"  blocks run down groups of {self.grouped_rows} grid rows, column by column"
                         + batch_rows_text(self.batch_rows))
        if self.copy_steps:
            lines.append(f"  the next k-tile's copies issued over the first {self.copy_steps} steps of each k-tile")
        if self.products == MMA_PRODUCTS:
            lines.append("  products on tensor cores: mma m16n8k8 on tf32, each f32 operand as big + small tf32, "
                         "3 mma per product")
        if self.products == WGMMA_16_BIT_PRODUCTS:
            columns = column_stage(tk)
            lines.append(f"  products on tensor cores: wgmma m64n{columns.tile[0]}k16 on {columns.dtype.name}, each "
                         "warpgroup 64 rows, both operands from swizzled shared memory that the block's threads fill, "
                         "f32 accumulators")
        if self.products == WGMMA_PRODUCTS:
            columns = column_stage(tk).tile[0]
            lines.append(f"  products on tensor cores: wgmma m64n{columns}k8 on tf32, each warpgroup 64 rows, each "
                         "f32 operand as big + small tf32: the rows' read from swizzled shared memory into registers "
                         "and split there, the columns' split in place in swizzled shared memory once a k-tile "
                         "lands; 3 wgmma per product summed over each k-tile, then added in f32")
        return lines

    def problems(self, tk: tile_ir.TileKernel) -> list[str]:
        return self._arrangement_problems(tk) + self._copy_issue_problems(tk) + self._tensor_core_problems(tk)

    def _arrangement_problems(self, tk: tile_ir.TileKernel) -> list[str]:
        problems = []
        threads = {d: 1 for d in tile_ir.BLOCK_DIMS}
        for b in tk.grid:
            threads[b.thread_dim] *= b.threads
        if self.warp_patch is not None:
            rows, columns = self.warp_patch
            if rows * columns != WARP_SIZE:
                problems.append(f"a warp patch of {rows} x {columns} threads is not {WARP_SIZE} threads")
            elif threads["x"] % columns or threads["y"] % rows:
                problems.append(f"warps of {rows} x {columns} threads do not tile the block's "
                                f"{threads['y']} x {threads['x']} threads")
        if self.grouped_rows < 1:
            problems.append(f"blocks grouped by {self.grouped_rows} grid rows: at least 1 is needed")
        return problems

    def _copy_issue_problems(self, tk: tile_ir.TileKernel) -> list[str]:
        if not self.copy_steps:
            return []
        steps = tk.reduction.step // tk.reduction.splits if tk.reduction else 0
        if not tk.stages or any(s.buffers != 2 for s in tk.stages):
            return [f"copies spread over {self.copy_steps} steps need operands staged in two buffers"]
        if not 0 < self.copy_steps <= steps:
            return [f"copies spread over {self.copy_steps} steps, where a k-tile has {steps}"]
        return []

    def _tensor_core_problems(self, tk: tile_ir.TileKernel) -> list[str]:
        """How the threads and k-tiles of a product's Tile IR fail its tensor-core products. Where
        no binding puts the products' columns along x (a row reduction whose lanes spread them),
        the schedule checks the Tile IR of its products as a contraction instead."""
        if self.products is None:
            return []
        if self.products not in (MMA_PRODUCTS, WGMMA_PRODUCTS, WGMMA_16_BIT_PRODUCTS):
            return [f"unknown tensor-core products {self.products!r}; the kinds are {MMA_PRODUCTS!r}, "
                    f"{WGMMA_PRODUCTS!r} and {WGMMA_16_BIT_PRODUCTS!r}"]
        by_dim = {b.thread_dim: b for b in tk.grid}
        if "x" not in by_dim:
            return []
        problems = _wgmma_problems(tk, self.products) if self.products != MMA_PRODUCTS else []
        columns, rows = by_dim.get("x"), by_dim.get("y")
        across = min(columns.threads, WARP_SIZE) if columns else WARP_SIZE
        patch = self.warp_patch or (WARP_SIZE // across, across)
        if patch != MMA_WARP:
            problems.append(f"tensor-core products need warps of {MMA_WARP[0]} x {MMA_WARP[1]} threads, not {patch}")
        if columns is None or rows is None or columns.group != 2 or rows.group != 1 or rows.per_thread % 2:
            problems.append("tensor-core products need each thread's rows in pairs, one by one, and its columns in "
                            "runs of 2")
        if tk.reduction is None or tk.reduction.splits != 1 or tk.reduction.step % 8:
            problems.append("tensor-core products need whole k-tiles per warp, in steps of 8")
        if self.copy_steps:
            problems.append(f"tensor-core products issue each k-tile's copies at once, not over {self.copy_steps} "
                            "steps")
        return problems


def settings_of(tk: tile_ir.TileKernel) -> ContractionSettings:
    """The contraction settings of ``tk``, or the defaults where it carries none."""
    settings = tk.settings
    return settings if isinstance(settings, ContractionSettings) else ContractionSettings()


def column_stage(tk: tile_ir.TileKernel) -> tile_ir.SharedStage:
    """The staged operand of wgmma products along the columns: the one whose rows are not the
    block's rows (those bound to y)."""
    rows = next((b.vars for b in tk.grid if b.thread_dim == "y"), ())
    return next(s for s in tk.stages if s.dims[0] not in rows)


def _wgmma_problems(tk: tile_ir.TileKernel, products: str) -> list[str]:
    problems = []
    by_dim = {b.thread_dim: b for b in tk.grid}
    columns, rows = by_dim.get("x"), by_dim.get("y")
    if rows is None or rows.block_tile % 64 or rows.per_thread != 2 or columns is None or columns.threads != 4:
        problems.append("wgmma products need blocks of whole warpgroups of 64 rows, 2 rows and 4 threads across "
                        "per warp's row of threads")
    sixteen_bit = products == WGMMA_16_BIT_PRODUCTS
    row = SWIZZLE_BYTES // (2 if sixteen_bit else 4)
    if tk.reduction is None or tk.reduction.step != row:
        problems.append(f"wgmma products take k-tiles of {row}: one swizzled row of "
                        f"{'16-bit values' if sixteen_bit else 'float32'}")
    copies = ("cp.async", "load_store") if sixteen_bit else ("cp.async",)
    if len(tk.stages) != 2 or any(s.swizzle != SWIZZLE_BYTES or s.tile[-1] != row or s.copy not in copies
                                  or (sixteen_bit and s.dtype.itemsize != 2) or s.buffers < 2 for s in tk.stages):
        problems.append(f"wgmma products read two operands staged K-major by {' or '.join(copies)} in the "
                        "128-byte swizzle, at least two buffers each")
    return problems


def batch_rows_text(batch_rows: int) -> str:
    """What the Tile IR adds to the block order where a batch's block rows run as one column."""
    if batch_rows == 1:
        return ""
    return (f", the block rows of the batch's {batch_rows} entries (which read the same B) one after another as "
            "one column")

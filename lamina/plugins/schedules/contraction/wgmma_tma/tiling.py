"""The Tile IR of a ``products = wgmma_tma`` setting, and the record of its decisions.

The bindings say what each consumer thread owns, as the wgmma's accumulators lie: along x,
4 threads across a row of the block, each with its columns in runs of 2, 8 apart; along y,
32 threads per consumer warpgroup, each with ``block_m / (32 groups)`` rows. The operands
are staged K-major, ``block x 64`` k-tiles in ``stages`` buffers, copied by the TMA in the
128-byte swizzle; B that lies along n is staged so, ``64 x block`` (``b_layout``).
``TmaGemmSettings`` adds the producer warpgroup to the block's threads, the mbarriers (and the
outputs' tile, ``staged_outputs`` or ``tma_stores``) to its shared memory, and prints the pipeline and, with
``tile_scheduler = persistent``, how many blocks walk the tiles.
"""

from __future__ import annotations

import math

import attrs

from lamina.core.ir import kernel_ir, tile_ir
from lamina.core.target import Target
from lamina.plugins.schedules.contraction.knobs import GRID, PERSISTENT, Choices
from lamina.plugins.schedules.contraction.recognise import Contraction, Piece
from lamina.plugins.schedules.contraction.settings import ContractionSettings, batch_rows_text
from lamina.plugins.schedules.contraction.wgmma_tma import cluster_slices, cost, operands, setting, tma_stores

PRODUCTS = "wgmma 16-bit tma"
"""The ``ContractionSettings.products`` of this setting."""
COLUMN_RUN = 2
"""Adjacent columns a consumer thread owns in a wgmma accumulator."""
COLUMN_THREADS = 4
"""Threads across a row of the block (``t`` of lane ``4 g + t``)."""


@attrs.frozen
class TmaGemmSettings(ContractionSettings):
    """``consumer_warpgroups`` warpgroups run the wgmma; one thread of a producer warpgroup beside them issues the
    TMA copies into the ring of stages (the staged operands' ``buffers``), a full and an empty
    mbarrier guarding each stage."""

    consumer_warpgroups: int = 1
    tile_scheduler: str = GRID
    b_layout: str = kernel_ir.K_MAJOR
    """``n_major``: B is staged as it lies, along n, in panels of 64 columns that the wgmma transposes."""
    staged_output_bytes: int = 0
    """Where the outputs go through a shared tile: its bytes."""
    staged_output_copy: str = ""
    """Who writes that tile out (``setting.staged_copy``): ``threads``, the whole block a row at a
    time (``staged_outputs``), or ``tma`` (``tma_stores``)."""
    persistent_blocks: int = 0
    """With ``tile_scheduler = persistent``, the blocks launched: each walks every this-many-th output tile."""
    early_read_registers: int = 0
    """Where the epilogue's reads of other buffers are issued before the products (``early_reads``):
    the registers they take in a consumer thread."""
    paired: bool = False
    """Whether the block sums a gate and its up projection side by side (``Contraction.paired``): the
    third stage holds the second weight's k-tiles, staged after the first's, and one wgmma twice as
    wide sums both."""
    pieces: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    """Where the kernel runs products of one input side by side (``Contraction.pieces``): each one's
    columns, weight and outputs, as the Tile IR prints them."""
    cluster_blocks: int = 1
    """Blocks of adjacent block rows that run as one cluster and share B's k-tiles (``knobs.CLUSTER_BLOCKS``)."""
    slice_sums_bytes: int = 0
    """Where the reduction is cut into slices that a cluster's blocks sum (``ReductionPlan.cluster_blocks``,
    ``cluster_slices``): the shared bytes in which a block leaves its sums for the cluster's first."""

    def extra_threads(self, tk: tile_ir.TileKernel) -> int:
        return setting.PRODUCER_THREADS

    def shared_bytes(self, tk: tile_ir.TileKernel) -> int:
        return setting.barrier_bytes(_stages(tk)) + self.staged_output_bytes + self.slice_sums_bytes

    def lines(self, tk: tile_ir.TileKernel) -> list[str]:
        columns = next(b.block_tile for b in tk.grid if b.block_dim == "x")
        rows = next(b.block_tile for b in tk.grid if b.block_dim == "y")
        dtype = tk.stages[0].dtype
        groups = (f"2 consumer warpgroups of {rows // 2} rows each" if self.consumer_warpgroups > 1
                  else "1 consumer warpgroup")
        order = ([f"  blocks run down groups of {self.grouped_rows} grid rows, column by column"
                  + batch_rows_text(self.batch_rows)]
                 if self.grouped_rows > 1 else [])
        if self.tile_scheduler == PERSISTENT and self.cluster_blocks > 1:
            pairs, clusters = persistent_tiles(tk) // self.cluster_blocks, self.persistent_blocks // self.cluster_blocks
            many = clusters > 1
            order.append(f"  persistent: {clusters} cluster{'s' if many else ''} of {self.cluster_blocks} blocks "
                         f"walk{'' if many else 's'} the {pairs} pairs of tiles, cluster c taking pairs c, "
                         f"c + {clusters}, ...; the producers copy a pair's first k-tiles while the consumers store "
                         "the pair before")
        elif self.tile_scheduler == PERSISTENT:
            tiles = persistent_tiles(tk)
            order.append(f"  persistent: {self.persistent_blocks} blocks walk the {tiles} tiles, block b taking tiles "
                         f"b, b + {self.persistent_blocks}, ...; the producer copies a tile's first k-tiles while the "
                         "consumers store the tile before")
        if self.cluster_blocks > 1:
            shared = ("one of the two weights' k-tiles" if self.paired
                      else f"half of B's k-tile ({columns // self.cluster_blocks} of its {columns} rows)")
            order.append(f"  clusters of {self.cluster_blocks} blocks of adjacent block rows sharing B: each block's "
                         f"producer copies {shared} and the TMA multicasts it to both blocks; a stage is refilled "
                         "once the consumers of both have released it")
        if tk.reduction is not None and tk.reduction.cluster_blocks > 1:
            order.append(cluster_slices.line(tk.reduction.extent, tk.reduction.cluster_blocks))
        paired = ([f"  two sums side by side: the k-tiles of {tk.stages[1].index} and {tk.stages[2].index} in one "
                   f"stage, {columns} rows each, summed by one wgmma into the accumulators of both; the epilogue "
                   "reads each output's two sums from the same thread's registers"] if self.paired else [])
        pieces = ([f"  {len(self.pieces)} products of one input side by side: a block's columns lie in one, whose "
                   "weight's k-tiles it copies through its own tensor map and whose epilogue it runs"]
                  + [f"    {piece}" for piece in self.pieces] if self.pieces else [])
        return order + pieces + [
            f"  copies: one thread of a producer warpgroup issues each stage's TMA loads (zero-filled past the edges), "
            f"in a ring of {_stages(tk)} stages, each guarded by a full and an empty mbarrier",
            f"  products on tensor cores: wgmma m64n{columns * (2 if self.paired else 1)}k16 on {dtype} from swizzled "
            f"shared memory, {groups}, f32 accumulators; a stage is released once the wgmma of the next have started",
        ] + paired + ([f"  B n-major: staged as it lies, along n, in panels of {kernel_ir.SWIZZLE_PANEL} columns, one TMA box "
              "each; the wgmma transposes it"] if self.b_layout == kernel_ir.N_MAJOR else []) + (
            self._staged_lines(rows, columns)) + (
            [f"  epilogue reads: issued before the products, into {self.early_read_registers} registers a consumer "
             "thread, so that they arrive while the tensor cores work"] if self.early_read_registers else [])

    def _staged_lines(self, rows: int, columns: int) -> list[str]:
        if self.staged_output_copy == setting.THREADS_COPY:
            return ["  outputs through shared memory: the consumers put the epilogue's values in a tile, then the "
                    "whole block writes it out a row at a time (rows whose outputs cannot be stored in aligned pairs)"]
        if self.staged_output_copy == setting.TMA_COPY:
            itemsize = self.staged_output_bytes // (rows * columns)
            if tma_stores.layout(itemsize, columns) == tma_stores.SWIZZLED:
                panels = columns // tma_stores.panel_columns(itemsize)
                tile = (f"{panels} panel{'s' if panels > 1 else ''} of {tma_stores.panel_columns(itemsize)} columns "
                        "in the 128-byte swizzle")
            else:
                tile, panels = "plain rows", 1
            return [f"  outputs stored by the TMA: the consumers put the epilogue's values in a shared tile ({tile}), "
                    f"then one thread copies it out in {panels} TMA store{'s' if panels > 1 else ''}, which write only "
                    "what lies inside the output"]
        return []

    def problems(self, tk: tile_ir.TileKernel) -> list[str]:
        problems = []
        by_dim = {b.thread_dim: b for b in tk.grid}
        columns, rows = by_dim.get("x"), by_dim.get("y")
        if columns is None or columns.threads != COLUMN_THREADS or columns.group != COLUMN_RUN:
            problems.append(f"wgmma_tma products need {COLUMN_THREADS} threads across a row, each with its columns "
                            f"in runs of {COLUMN_RUN}")
        if rows is None or rows.threads != kernel_ir.WARP_SIZE * self.consumer_warpgroups or \
                rows.block_tile % (kernel_ir.WGMMA_M * self.consumer_warpgroups):
            problems.append("wgmma_tma products need 32 threads along the rows per consumer warpgroup, each "
                            "warpgroup 64-row slices of the block")
        if tk.reduction is None or tk.reduction.step != setting.BLOCK_K or tk.reduction.splits != 1:
            problems.append(f"wgmma_tma products take k-tiles of {setting.BLOCK_K}: one swizzled row")
        staged_by_tma = all(s.copy == "tma" and s.swizzle == kernel_ir.SWIZZLE_BYTES for s in tk.stages)
        if len(tk.stages) != (3 if self.paired else 2) or not staged_by_tma \
                or tk.stages[0].tile[-1] != setting.BLOCK_K or not _staged_as_read(tk.stages[1], self.b_layout):
            problems.append("wgmma_tma products read A staged K-major and B K-major or in panels of n, by the TMA in "
                            "the 128-byte swizzle")
        return problems


def _staged_as_read(stage: tile_ir.SharedStage, b_layout: str) -> bool:
    """Whether B's stage holds k-tiles as ``b_layout`` reads them: rows of 64 k, or 64 rows of k
    by whole panels of n."""
    if b_layout == kernel_ir.N_MAJOR:
        return stage.tile[0] == setting.BLOCK_K and stage.tile[-1] % kernel_ir.SWIZZLE_PANEL == 0
    return stage.tile[-1] == setting.BLOCK_K


def _stages(tk: tile_ir.TileKernel) -> int:
    return tk.stages[0].buffers if tk.stages else 0


def _piece_text(piece: Piece) -> str:
    outputs = ", ".join(dict.fromkeys(s.buffer for s in piece.contraction.epilogue))
    last = piece.first_column + piece.columns - 1
    return f"columns {piece.first_column} to {last}: {piece.column_operand.text}, into {outputs}"


def persistent_tiles(tk: tile_ir.TileKernel) -> int:
    """The output tiles of the whole grid, the batch's included."""
    return math.prod(tk.grid_shape().values())


def persistent_blocks(c: Contraction, choices: Choices, target: Target) -> int:
    """As many blocks as the SMs hold at once (``cost.resident``), or one per tile where there are fewer;
    in clusters, whole clusters of them."""
    tiles = (math.ceil(c.extents[c.m] / choices.block_m) * math.ceil(c.extents[c.n] / choices.block_n)
             * math.prod(c.extents[v] for v in c.batch))
    cluster = choices.cluster_blocks or 1
    blocks = min(tiles, cost.resident(c, choices, target) * target.sm_count)
    return max(cluster, blocks // cluster * cluster)


def tile_kernel(c: Contraction, choices: Choices, target: Target, notes: list[tuple[str, object]],
                schedule: str) -> tile_ir.TileKernel:
    """The Tile IR of ``choices``, with ``notes`` among its knobs."""
    groups = choices.consumer_warpgroups
    row_threads = kernel_ir.WARP_SIZE * groups
    grid = [
        tile_ir.AxisBinding((c.n,), c.extents[c.n], "x", COLUMN_THREADS, choices.block_n // COLUMN_THREADS, "x",
                            contiguous=False, group=COLUMN_RUN),
        tile_ir.AxisBinding((c.m,), c.extents[c.m], "y", row_threads, choices.block_m // row_threads, "y",
                            contiguous=False),
    ]
    if c.batch:
        batch = 1
        for v in c.batch:
            batch *= c.extents[v]
        grid.append(tile_ir.AxisBinding(c.batch, batch, "z", 1, 1, "z"))
    reduction = tile_ir.ReductionPlan((c.reduce_var,), c.reduce_extent, "serial", setting.BLOCK_K, 1,
                                      cluster_slices.slices(choices))
    stages = []
    b_layout = setting.b_layout(c)
    for operand in operands.factors(c) + ((c.paired.operand,) if c.paired else ()):
        block = choices.block_m if operand.side == "m" else choices.block_n
        side_var = c.m if operand.side == "m" else c.n
        box = block * setting.BLOCK_K * operand.load.dtype.itemsize
        dims, tile = (side_var, c.reduce_var), (block, setting.BLOCK_K)
        if operand.side == "n" and b_layout == kernel_ir.N_MAJOR:
            dims, tile = dims[::-1], tile[::-1]
            box = setting.BLOCK_K * kernel_ir.SWIZZLE_PANEL * operand.load.dtype.itemsize
        stages.append(tile_ir.SharedStage(
            buffer=operand.load.buffer, index=operand.text, dims=dims, tile=tile,
            dtype=operand.load.dtype, padding=0, buffers=choices.stages, copy="tma", copy_bytes=box,
            swizzle=kernel_ir.SWIZZLE_BYTES))
    recorded = [("register_tile", f"{choices.block_m // row_threads}x{choices.block_n // COLUMN_THREADS}"), *notes]
    tile = tile_ir.TileKernel(
        kernel=c.kernel, schedule=schedule, grid=grid, reduction=reduction, stages=tuple(stages), knobs=recorded,
        settings=TmaGemmSettings(grouped_rows=choices.grouped_rows or 1, products=PRODUCTS,
                                 consumer_warpgroups=groups, tile_scheduler=choices.tile_scheduler or GRID,
                                 b_layout=b_layout,
                                 staged_output_bytes=setting.staged_tile_bytes(c, choices),
                                 staged_output_copy=setting.staged_copy(c, choices),
                                 persistent_blocks=(persistent_blocks(c, choices, target)
                                                    if choices.tile_scheduler == PERSISTENT else 0),
                                 early_read_registers=setting.early_read_registers(c, choices),
                                 paired=c.paired is not None, pieces=tuple(_piece_text(p) for p in c.pieces),
                                 cluster_blocks=choices.cluster_blocks or 1,
                                 slice_sums_bytes=setting.slice_sums_bytes(c, choices),
                                 batch_rows=(setting.batch_rows(c, choices) if (choices.grouped_rows or 1) > 1
                                             else 1)),
    )
    tile_ir.verify_tile_kernel(tile, target.max_threads_per_block, target.max_shared_bytes_optin)
    return tile

"""The Kernel IR of a ``products = wgmma_tma`` Tile IR: a pipelined, warp-specialised GEMM.

The block's threads are its consumer warpgroups (threads ``0 .. 128 groups - 1``, so that
each warpgroup is four warps aligned as wgmma needs) and a producer warpgroup after them (a block runs whole
warpgroups). Thread
0 sets up a full and an empty mbarrier per stage of the ring and the block meets once.

The producer warpgroup's first thread walks the k-tiles: for k-tile ``kt`` in stage
``kt % stages``, round ``kt // stages``, it waits until the consumers have emptied the stage
in the round before (at once in the first round), arrives on its full barrier expecting the
bytes of both boxes, and asks the TMA for the box of A's rows and of B's rows at columns
``64 kt`` (B that lies along n, ``b_layout``: one box of the k-tile's rows per 64 of the
block's columns); the boxes land swizzled, elements past the tensors' edges as zeros that count
toward the bytes. The consumers wait for the stage's full phase, start the wgmma of the
k-tile (per 16 k, one m64nNk16 per 64 rows of their slice), commit them, wait until at most
this k-tile's group is still running and so release the stage of the k-tile before, whose
wgmma are done: the tensor cores always have the next k-tile's wgmma queued while a stage is
refilled. After the last k-tile they wait for every wgmma and run the epilogue
(``epilogue.TmaGemmEpilogue``); where it goes through a shared tile (``staged_outputs``), the
whole block meets after it and writes the tile out.

With ``tile_scheduler = persistent`` the grid is as many blocks as the SMs hold, and both roles
walk the block's tiles, ``blockIdx.x``, then every ``gridDim.x``-th: the ring's k-tiles are
counted across the tiles, so that the producer goes on to the next tile's first k-tiles as soon
as the consumers release the stages of the last, while they still run its epilogue; the
consumers release the last k-tile's stage once its wgmma are done.

With ``cluster_blocks = 2`` the grid's x runs over the block columns twice, so that two blocks
side by side (a cluster) take the same columns of two adjacent block rows: each block's producer
copies half of B's k-tile (of a gate and its up projection, the weight of its rank) and the TMA
multicasts it into both blocks' stages, completing on both full barriers, which expect the whole
stage. A stage of one block is refilled by the other's copies too, so its empty barrier also waits
for one thread of each of the other block's consumer warps; the cluster meets after the barriers'
setup and again before it ends, so that no block's barriers are used before they exist or after
its end.

Where the reduction is cut into slices summed in a cluster (``cluster_slices``), the grid's x runs
over each block column's slices, block ``r`` of a cluster summing slice ``r``'s k-tiles; the first
block adds the others' sums and alone runs the epilogue (``cluster_slices``).

A kernel that sums a gate and its up projection side by side (``Contraction.paired``) stages
each k-tile of the second weight's rows after the first's, in the same stage of B, one more box
on the same full barrier; one wgmma of twice the block's columns sums both, so that a thread's
accumulators hold each of its outputs' two sums ``block_n / 2`` elements apart. A kernel of products
of one input side by side (``Contraction.pieces``) copies the k-tiles of the weight of the product
its block's columns lie in, and runs that product's epilogue (``pieces``).
"""

from __future__ import annotations

import math

from lamina.core.ir import dtypes, expr as ex, kernel_ir, loop_ir, tile_ir
from lamina.core.ir.expr import Expr
from lamina.plugins.schedules import loop_to_kernel
from lamina.plugins.schedules.contraction import arrangement
from lamina.plugins.schedules.contraction.knobs import PERSISTENT
from lamina.plugins.schedules.contraction.layout import KernelNames, batch_coordinates, dynamic_shared_bytes
from lamina.plugins.schedules.contraction.recognise import Contraction
from lamina.plugins.schedules.contraction.wgmma_tma import operands, setting
from lamina.plugins.schedules.contraction.wgmma_tma import cluster_slices
from lamina.plugins.schedules.contraction.wgmma_tma.cluster_slices import SlicesInCluster
from lamina.plugins.schedules.contraction.wgmma_tma.epilogue import TmaGemmEpilogue
from lamina.plugins.schedules.contraction.wgmma_tma.pieces import SideBySidePieces
from lamina.plugins.schedules.contraction.wgmma_tma.staged_outputs import StagedOutputs
from lamina.plugins.schedules.contraction.wgmma_tma.tiling import TmaGemmSettings, persistent_tiles
from lamina.plugins.schedules.contraction.wgmma_tma.tma_stores import TmaStoredOutputs


class TmaGemmWriter:
    """Writes the Kernel IR of a contraction scheduled with ``products = wgmma_tma``."""

    def __init__(self, tile: tile_ir.TileKernel, c: Contraction):
        self.tile, self.c, self.kernel = tile, c, c.kernel
        settings: TmaGemmSettings = tile.settings
        self.groups = settings.consumer_warpgroups
        bindings = {b.block_dim: b for b in tile.grid}
        self.cols, self.rows = bindings["x"], bindings["y"]
        self.block_m, self.block_n = self.rows.block_tile, self.cols.block_tile
        self.slices = self.block_m // (kernel_ir.WGMMA_M * self.groups)
        """64-row wgmma slices per consumer warpgroup."""
        self.m_side, self.n_side = operands.factors(c)
        self.dtype = self.m_side.load.dtype
        self.stages = tile.stages[0].buffers
        self.k_tiles = math.ceil(c.reduce_extent / setting.BLOCK_K)
        """K-tiles of a block; a split-K slice that ends sooner (the last) runs ``k_tiles_here``."""
        loop_vars = {s.var for s in loop_ir.statements(self.kernel.body) if isinstance(s, loop_ir.Loop)}
        self.names = names = KernelNames({b.name for b in self.kernel.inputs + self.kernel.outputs} | loop_vars
                                         | {c.acc} | ({c.paired.acc} if c.paired else set()))
        self.tid, self.kt, self.stage, self.round, self.warpgroup, self.batch = (
            ex.Var(names.fresh(n)) for n in ("tid", "kt", "stage", "round", "warpgroup", "batch"))
        self.grouped_rows = settings.grouped_rows
        self.batch_rows = settings.batch_rows
        self.persistent = settings.tile_scheduler == PERSISTENT
        self.blocks = settings.persistent_blocks
        self.walk, self.tile_index = ex.Var(names.fresh("walk")), ex.Var(names.fresh("tile"))
        self.cluster = settings.cluster_blocks
        self.rank = kernel_ir.block_idx("x") % self.cluster
        """The block's rank in its cluster (clusters are adjacent blocks along x)."""
        self.sliced = tile.reduction.cluster_blocks
        """Slices of the reduction, one per block of a cluster (``cluster_slices``)."""
        if self.grouped_rows > 1 or self.persistent or self.cluster > 1 or self.sliced > 1:
            self.block_row, self.block_col = ex.Var(names.fresh("block_row")), ex.Var(names.fresh("block_col"))
        else:
            self.block_row, self.block_col = kernel_ir.block_idx("y"), kernel_ir.block_idx("x")
        self.n_major = settings.b_layout == kernel_ir.N_MAJOR
        self.panels = self.block_n // kernel_ir.SWIZZLE_PANEL
        """With B n-major: its stage's panels of 64 columns, a TMA box each."""
        self.sides = (("m", self.m_side), ("n", self.n_side)) + ((("paired", c.paired.operand),) if c.paired else ())
        self.tiles = {side: names.fresh(f"{o.load.buffer}_tile") for side, o in self.sides[:2]}
        self.maps = {side: names.fresh(f"{o.load.buffer}_map") for side, o in self.sides}
        self.summed = self.block_n * (2 if c.paired else 1)
        """The columns a block sums: the wgmma's N."""
        self.full, self.empty, self.acc = names.fresh("full"), names.fresh("empty"), names.fresh("acc")
        self.consumers = self.groups * kernel_ir.WARPGROUP_SIZE
        self.batch_env = batch_coordinates(c, self.batch)
        self.k_tiles_here: Expr = ex.const(self.k_tiles)
        self.summing: SlicesInCluster | None = None
        if self.sliced > 1:
            self.k_tiles = cluster_slices.k_tiles_per_slice(c.reduce_extent, self.sliced)
            self.summing = SlicesInCluster(self.sliced, self.acc, self.slices, self.summed // 2, self.consumers,
                                           self.tid, names.fresh("slice_sums"))
        if c.slice_bound is not None or self.sliced > 1:
            self.k_tiles_here = ex.Var(names.fresh("slice_k_tiles"))
        self.staged: StagedOutputs | TmaStoredOutputs | None = None
        if settings.staged_output_copy == setting.THREADS_COPY:
            self.staged = StagedOutputs(c, names.fresh("out_tile"), self.block_m, self.block_n,
                                        self.consumers + setting.PRODUCER_THREADS, self.block_row, self.block_col,
                                        self.batch_env, names.fresh)
        elif settings.staged_output_copy == setting.TMA_COPY:
            self.staged = TmaStoredOutputs(c, names.fresh("out_tile"), names.fresh(f"{c.epilogue[0].buffer}_map"),
                                           self.block_m, self.block_n, self.block_row, self.block_col)
        self.pieces = SideBySidePieces(c, names, self.block_col, self.block_n, self._piece_epilogue) if c.pieces else None
        self.epilogue = self.pieces or TmaGemmEpilogue(
            c, self.names, self.tid, self.warpgroup, self.acc, self.block_m, self.block_n, self.slices, self.batch_env,
            self.block_row, self.block_col, self.staged, settings.early_read_registers > 0,
            paired_offset=self.block_n // 2 if c.paired else None)

    def _piece_epilogue(self, piece: Contraction, block_col: Expr) -> TmaGemmEpilogue:
        """The epilogue of one of the products side by side (``Contraction.pieces``), its block column
        counted among that product's."""
        return TmaGemmEpilogue(piece, self.names, self.tid, self.warpgroup, self.acc, self.block_m, self.block_n,
                               self.slices, self.batch_env, self.block_row, block_col)

    # --- the two roles -----------------------------------------------------------

    def _k_tiles_before(self) -> Expr:
        """The ring's k-tiles this thread has passed before k-tile ``kt`` of its tile: those of its
        earlier tiles, with persistent blocks."""
        return self.walk * self.k_tiles + self.kt if self.persistent else self.kt

    def _stage_of_k_tile(self) -> list[kernel_ir.Stmt]:
        count = self._k_tiles_before()
        return [kernel_ir.Declare(self.stage.name, self.stage.dtype, count % self.stages),
                kernel_ir.Declare(self.round.name, self.round.dtype, count // self.stages)]

    def _box_rows(self, side: str) -> Expr:
        """The tensor map's row of the block's first row of the operand on ``side``."""
        view = operands.view(self.c, dict(self.sides)[side])
        block = self.block_row * self.block_m if side == "m" else self.block_col * self.block_n
        return view.first_row(self.batch_env) + block

    def _first_k_tile(self) -> Expr:
        """The block's first k-tile: its slice's, where a cluster's blocks sum the slices."""
        return self.summing.rank * self.k_tiles if self.summing is not None else ex.const(0)

    def _box_column(self, side: str) -> Expr:
        """The tensor map's column of k-tile ``kt`` (from the block's split-K slice's start)."""
        view = operands.view(self.c, dict(self.sides)[side])
        return view.first_column(self.batch_env) + (self._first_k_tile() + self.kt) * setting.BLOCK_K

    def _slice_k_tiles(self) -> list[kernel_ir.Stmt]:
        """The k-tiles of the block's split-K slice: the last slice ends at the reduction's end, its
        last k-tile reading zeros past it; the others are whole k-tiles."""
        bound = self.c.slice_bound
        if self.summing is not None:
            left = math.ceil(self.c.reduce_extent / setting.BLOCK_K) - self._first_k_tile()
            return [kernel_ir.Declare(self.k_tiles_here.name, self.k_tiles_here.dtype,
                                      ex.op("min", left, self.k_tiles))]
        if bound is None:
            return []
        left = bound.end - ex.substitute(bound.start, self.batch_env)
        tiles = ex.op("min", (left + (setting.BLOCK_K - 1)) // setting.BLOCK_K, self.k_tiles)
        return [kernel_ir.Declare(self.k_tiles_here.name, self.k_tiles_here.dtype, tiles)]

    def _n_major_loads(self) -> list[kernel_ir.TmaLoad]:
        """B's boxes of a k-tile where it lies along n: one per panel of 64 columns, its rows the k-tile's."""
        view = operands.view(self.c, self.n_side)
        row = view.first_row(self.batch_env) + self.kt * setting.BLOCK_K
        column = view.first_column(self.batch_env) + self.block_col * self.block_n
        return [kernel_ir.TmaLoad(self.tiles["n"], (self.stage, ex.const(p), ex.const(0), ex.const(0)), self.maps["n"],
                                  row, column + kernel_ir.SWIZZLE_PANEL * p, self.full, (self.stage,))
                for p in range(self.panels)]

    def _load(self, side: str, first_row: Expr, rows: Expr = ex.const(0), multicast: tuple[int, ...] = ()):
        """The k-tile's box of ``side`` from ``rows`` past the block's first row of it, into the stage's rows
        from ``first_row`` on (of B's tile for the second weight of a pair)."""
        return kernel_ir.TmaLoad(self.tiles[side if side != "paired" else "n"], (self.stage, first_row, ex.const(0)),
                                 self.maps[side], self._box_rows(side) + rows, self._box_column(side), self.full,
                                 (self.stage,), multicast)

    def _shared_b_loads(self) -> list[kernel_ir.Stmt]:
        """In a cluster, this block's share of B's k-tile, multicast to every block of the cluster: half of its
        rows, or of a gate and its up projection the weight of the block's rank."""
        everyone = tuple(range(self.cluster))
        if self.c.paired:
            return [kernel_ir.If(ex.op("eq", self.rank, 0), [self._load("n", ex.const(0), multicast=everyone)],
                                 [self._load("paired", ex.const(self.block_n), multicast=everyone)])]
        share = self.rank * (self.block_n // self.cluster)
        return [self._load("n", share, share, everyone)]

    def producer(self) -> list[kernel_ir.Stmt]:
        """The elected thread's loop: a stage emptied, its bytes expected, its boxes asked for."""
        box_bytes = (self.block_m + self.summed) * setting.BLOCK_K * self.dtype.itemsize
        at_stage = (self.stage,)
        if self.cluster > 1:
            loads = [self._load("m", ex.const(0)), *self._shared_b_loads()]
        elif self.n_major:
            loads = [self._load("m", ex.const(0)), *self._n_major_loads()]
        elif self.pieces is not None:
            loads = [self._load("m", ex.const(0)),
                     *self.pieces.loads(self.tiles["n"], self.stage, self.kt, self.full, self.batch_env)]
        else:
            first_row = {"m": 0, "n": 0, "paired": self.block_n}
            loads = [self._load(side, ex.const(first_row[side])) for side, _ in self.sides]
        body = [*self._stage_of_k_tile(),
                kernel_ir.MbarrierWait(self.empty, at_stage, (self.round + 1) % 2),
                kernel_ir.MbarrierArrive(self.full, at_stage, box_bytes),
                *loads]
        return self._each_tile([self._k_tile_loop(body)])

    def _each_tile(self, body: list[kernel_ir.Stmt]) -> list[kernel_ir.Stmt]:
        """``body`` for the block's tile, or with persistent blocks for each of its tiles, its
        coordinates declared first (every block walks as many steps; a step past the last tile does
        nothing)."""
        if not self.persistent:
            return body
        # in clusters, a cluster walks pairs of tiles as a block walks tiles, both its blocks in step
        tiles = persistent_tiles(self.tile) // self.cluster
        walkers = self.blocks // self.cluster
        steps = math.ceil(tiles / walkers)
        tile = self.walk * walkers + kernel_ir.block_idx("x") // self.cluster
        coordinates = self._coordinates if self.cluster == 1 else self._pair_coordinates
        return [kernel_ir.For(self.walk.name, ex.const(0), ex.const(steps), 1, [
            kernel_ir.Declare(self.tile_index.name, self.tile_index.dtype, tile),
            kernel_ir.If(ex.op("lt", self.tile_index, tiles), [*coordinates(self.tile_index), *body])])]

    def _coordinates(self, tile: Expr) -> list[kernel_ir.Stmt]:
        """The block row, block column and batch of the grid's ``tile``-th block in CUDA's order (x
        fastest), renumbered as ``grouped_rows`` asks."""
        grid = self.tile.grid_shape()
        per_batch = grid["x"] * grid["y"]
        flat = tile % per_batch if grid["z"] > 1 else tile
        out = [kernel_ir.Declare(self.batch.name, self.batch.dtype, tile // per_batch)] if self.c.batch else []
        if self.grouped_rows > 1:
            return out + arrangement.grouped_blocks(self.block_row, self.block_col, grid["x"], grid["y"],
                                                    self.grouped_rows, flat)
        return out + [kernel_ir.Declare(self.block_row.name, self.block_row.dtype, flat // grid["x"]),
                      kernel_ir.Declare(self.block_col.name, self.block_col.dtype, flat % grid["x"])]

    def _k_tile_loop(self, body: list[kernel_ir.Stmt]) -> kernel_ir.For:
        """``body`` for each k-tile of the block: every block loops as long (loop bounds are the same
        in every thread of the grid), a shorter split-K slice skipping the k-tiles past its end."""
        if self.c.slice_bound is not None or self.summing is not None:
            body = [kernel_ir.If(ex.op("lt", self.kt, self.k_tiles_here), body)]
        return kernel_ir.For(self.kt.name, ex.const(0), ex.const(self.k_tiles), 1, body)

    def _products(self) -> list[kernel_ir.Stmt]:
        """The warpgroup's wgmma of the k-tile in ``stage``: per 16 k, one per 64-row slice."""
        n = self.summed
        k = kernel_ir.wgmma_k(self.dtype)
        first_row = self.warpgroup * (kernel_ir.WGMMA_M * self.slices)
        out = []
        for j in range(setting.BLOCK_K // k):
            for q in range(self.slices):
                accumulators = [(ex.const(q), ex.const(p)) for p in range(n // 2)]
                b_index = ((self.stage, ex.const(0), ex.const(k * j), ex.const(0)) if self.n_major
                           else (self.stage, ex.const(0), ex.const(k * j)))
                out.append(kernel_ir.Wgmma(
                    self.acc, accumulators, self.tiles["m"], (self.stage, first_row + kernel_ir.WGMMA_M * q,
                                                              ex.const(k * j)),
                    self.tiles["n"], b_index, n, operand_dtype=self.dtype,
                    b_layout=kernel_ir.N_MAJOR if self.n_major else kernel_ir.K_MAJOR))
        return out

    def _release(self, stage: tuple[Expr]) -> list[kernel_ir.Stmt]:
        """The consumer thread's arrival on ``stage``'s empty barrier; in a cluster, where the other blocks'
        producers copy into this block's stages too, one thread of each warp tells theirs as well."""
        own = [kernel_ir.MbarrierArrive(self.empty, stage)]
        if self.cluster == 1:
            return own
        others = [kernel_ir.MbarrierArrive(self.empty, stage, rank=(self.rank + r) % self.cluster)
                  for r in range(1, self.cluster)]
        return own + [kernel_ir.If(ex.op("eq", self.tid % kernel_ir.WARP_SIZE, 0), others)]

    def consumer(self) -> list[kernel_ir.Stmt]:
        """Accumulators set to the sum's start; per k-tile, its stage waited for, its wgmma started, the stage
        of the k-tile before released once its wgmma are done; then the epilogue."""
        init = ex.cast(self.c.init, self.c.acc_dtype)
        clear = [kernel_ir.Store(self.acc, (ex.const(q), ex.const(p)), init)
                 for q in range(self.slices) for p in range(self.summed // 2)]
        before = (self._k_tiles_before() + (self.stages - 1)) % self.stages
        body = [*self._stage_of_k_tile(),
                kernel_ir.MbarrierWait(self.full, (self.stage,), self.round % 2),
                kernel_ir.WgmmaFence(),
                *self._products(),
                kernel_ir.WgmmaCommit(),
                kernel_ir.WgmmaWait(1),
                kernel_ir.If(ex.op("gt", self.kt, 0), self._release((before,)))]
        done = [kernel_ir.WgmmaWait(0)]
        if self.persistent:  # the next tile's k-tiles wait for this stage
            last = (self.walk * self.k_tiles + (self.k_tiles - 1)) % self.stages
            done += self._release((last,))
        if self.summing is not None:  # the epilogue waits for the cluster's other slices (``_summed_slices``)
            return [*self._warpgroup(), *clear, *self.epilogue.before_products(), self._k_tile_loop(body), *done,
                    *self.summing.put_sums()]
        return [*self._warpgroup(),
                *self._each_tile([*clear, *self.epilogue.before_products(), self._k_tile_loop(body), *done,
                                  *self._epilogue()])]

    def _warpgroup(self) -> list[kernel_ir.Stmt]:
        return [kernel_ir.Declare(self.warpgroup.name, self.warpgroup.dtype, self.tid // kernel_ir.WARPGROUP_SIZE)]

    def _epilogue(self) -> list[kernel_ir.Stmt]:
        return [*self.epilogue.statements(), *(self.staged.after_puts() if self.staged is not None else [])]

    def _summed_slices(self) -> list[kernel_ir.Stmt]:
        """Once every block of the cluster has left its sums: the first block's consumer threads add the
        others' to their own and run the epilogue; the cluster meets again before any block may end."""
        consumers = [*self._warpgroup(), *self.summing.add_others(), *self._epilogue()]
        return [kernel_ir.ClusterBarrier(),
                *self.summing.first_only([kernel_ir.If(ex.op("lt", self.tid, self.consumers), consumers)]),
                kernel_ir.ClusterBarrier()]

    # --- the kernel --------------------------------------------------------------

    def body(self) -> list[kernel_ir.Stmt]:
        out: list[kernel_ir.Stmt] = [kernel_ir.Declare(self.tid.name, self.tid.dtype, kernel_ir.thread_idx("x"))]
        if self.c.batch and not self.persistent and self.batch_rows == 1:
            out.append(kernel_ir.Declare(self.batch.name, self.batch.dtype, kernel_ir.block_idx("z")))
        if self.batch_rows > 1:
            out += arrangement.blocks_across_batch(self.batch, self.block_row, self.block_col,
                                                   ex.Var(self.names.fresh("row_of_batch")), self.tile.grid_shape(),
                                                   self.grouped_rows)
        elif self.cluster > 1 and not self.persistent:
            out += self._pair_coordinates(kernel_ir.block_idx("y") * self.tile.grid_shape()["x"]
                                          + kernel_ir.block_idx("x") // self.cluster)
        elif self.summing is not None:
            out += self._slice_coordinates()
        elif self.grouped_rows > 1 and not self.persistent:
            grid = self.tile.grid_shape()
            out += arrangement.grouped_blocks(self.block_row, self.block_col, grid["x"], grid["y"], self.grouped_rows)
        out += self._slice_k_tiles()
        releases = self.consumers + (self.cluster - 1) * (self.consumers // kernel_ir.WARP_SIZE)
        inits = [st for i in range(self.stages)
                 for st in (kernel_ir.MbarrierInit(self.full, (ex.const(i),), 1),
                            kernel_ir.MbarrierInit(self.empty, (ex.const(i),), releases))]
        elected = ex.op("eq", self.tid, self.consumers)
        # in a cluster the other blocks' copies and arrivals reach this block's barriers: all must be set up first
        meet = [kernel_ir.ClusterBarrier()] if self.cluster > 1 else []
        out += [kernel_ir.If(ex.op("eq", self.tid, 0), inits),
                kernel_ir.Barrier(), *meet,
                kernel_ir.If(ex.op("ge", self.tid, self.consumers), [kernel_ir.If(elected, self.producer())],
                             self.consumer())]
        if self.summing is not None:
            out += self._summed_slices()
        if self.staged is not None:
            copy_out = self.staged.copy_out()
            out += [kernel_ir.Barrier(), *(self.summing.first_only(copy_out) if self.summing is not None else copy_out)]
        # and no block may end while another's last arrivals may still reach its barriers
        return out + meet

    def _slice_coordinates(self) -> list[kernel_ir.Stmt]:
        """The block's row and column where the grid's x runs over each block column's slices (the
        cluster of a tile's slices), renumbered to run down groups of rows as ``grouped_rows`` asks."""
        grid = self.tile.grid_shape()
        columns = grid["x"] // self.sliced
        flat = kernel_ir.block_idx("y") * columns + kernel_ir.block_idx("x") // self.sliced
        if self.grouped_rows > 1:
            return arrangement.grouped_blocks(self.block_row, self.block_col, columns, grid["y"], self.grouped_rows,
                                              flat)
        return [kernel_ir.Declare(self.block_row.name, self.block_row.dtype, kernel_ir.block_idx("y")),
                kernel_ir.Declare(self.block_col.name, self.block_col.dtype, kernel_ir.block_idx("x") // self.sliced)]

    def _pair_coordinates(self, flat: Expr) -> list[kernel_ir.Stmt]:
        """The block's row, column (and batch, with persistent blocks) where clusters pair adjacent block
        rows: ``flat`` numbers the pairs of tiles as CUDA numbers blocks (the columns fastest, then the
        pairs of rows, then the batch), renumbered to run down groups of pairs where the blocks run
        down groups of rows; the block's rank in its cluster picks its row of the pair."""
        grid = self.tile.grid_shape()
        columns, pairs = grid["x"], grid["y"] // self.cluster
        out = []
        if self.persistent and grid["z"] > 1:
            if self.c.batch:
                out.append(kernel_ir.Declare(self.batch.name, self.batch.dtype, flat // (columns * pairs)))
            flat = flat % (columns * pairs)
        pair = ex.Var(self.names.fresh("pair_row"))
        if self.grouped_rows > 1:
            out += arrangement.grouped_blocks(pair, self.block_col, columns, pairs,
                                              max(1, self.grouped_rows // self.cluster), flat)
        else:
            out += [kernel_ir.Declare(pair.name, pair.dtype, flat // columns),
                    kernel_ir.Declare(self.block_col.name, self.block_col.dtype, flat % columns)]
        return out + [kernel_ir.Declare(self.block_row.name, self.block_row.dtype, pair * self.cluster + self.rank)]

    def tensor_maps(self) -> list[kernel_ir.TensorMap]:
        maps = []
        for side, operand in self.sides:
            if side == "n" and self.pieces is not None:
                maps += self.pieces.tensor_maps()
                continue
            block = self.block_m if side == "m" else self.block_n
            view = operands.view(self.c, operand)
            n_major = side == "n" and self.n_major
            if side == "n" and self.cluster > 1 and not self.c.paired:
                block //= self.cluster  # each block of the cluster copies its share
            box = (setting.BLOCK_K, kernel_ir.SWIZZLE_PANEL) if n_major else (block, setting.BLOCK_K)
            maps.append(kernel_ir.TensorMap(self.maps[side], operand.load.buffer, (view.rows, view.columns),
                                            view.row_stride, box, kernel_ir.SWIZZLE_BYTES))
        return maps + (self.staged.tensor_maps() if self.staged is not None else [])

    def arrays(self) -> list[kernel_ir.Array]:
        shared = [
            kernel_ir.Array(self.tiles["m"], self.dtype, (self.stages, self.block_m, setting.BLOCK_K), "shared",
                            swizzle=kernel_ir.SWIZZLE_BYTES),
            kernel_ir.Array(self.tiles["n"], self.dtype, self._n_tile_shape(), "shared",
                            swizzle=kernel_ir.SWIZZLE_BYTES),
            kernel_ir.Array(self.full, dtypes.int64, (self.stages,), "shared"),
            kernel_ir.Array(self.empty, dtypes.int64, (self.stages,), "shared"),
        ]
        if self.staged is not None:
            shared.append(self.staged.array())
        if self.summing is not None:
            shared.append(self.summing.array())
        registers = [kernel_ir.Array(self.acc, self.c.acc_dtype, (self.slices, self.summed // 2), "register")]
        return shared + registers + self.epilogue.arrays()

    def _n_tile_shape(self) -> tuple[int, ...]:
        """B's ring: per stage ``block_n`` rows of a k-tile, or where B lies along n, its panels of 64 rows of k."""
        if self.n_major:
            return (self.stages, self.panels, setting.BLOCK_K, kernel_ir.SWIZZLE_PANEL)
        return (self.stages, self.summed, setting.BLOCK_K)

    def kernel_ir(self, static_shared_bytes: int) -> kernel_ir.Kernel:
        """The kernel; past ``static_shared_bytes`` its shared arrays come from dynamic shared memory."""
        grid = self.tile.grid_shape()
        if self.persistent:
            grid = {"x": self.blocks, "y": 1, "z": 1}
        elif self.cluster > 1:
            grid = {**grid, "x": grid["x"] * self.cluster, "y": grid["y"] // self.cluster}
        arrays = self.arrays()
        return kernel_ir.Kernel(
            name=self.kernel.name,
            params=loop_to_kernel.params(self.kernel),
            arrays=arrays,
            body=self.body(),
            launch=kernel_ir.Launch((grid["x"], grid["y"], grid["z"]),
                                    (self.consumers + setting.PRODUCER_THREADS, 1, 1),
                                    dynamic_shared_bytes(arrays, static_shared_bytes),
                                    cluster=(max(self.cluster, self.sliced), 1, 1)),
            tensor_maps=self.tensor_maps(),
            sizes=loop_to_kernel.size_params(self.kernel),
        )

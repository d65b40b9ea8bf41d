"""The contraction's Tile IR written as Kernel IR where its products run on wgmma.

Per k-tile (``products`` says why each piece is there): wait for its copies and
meet at a barrier; split the n side's k-tile in place, 16 bytes a thread at a time, its
small pieces to the half of their array that the last k-tile's wgmma, still running, do not
read; wait for those wgmma and add their sum to the accumulators; read each thread's values
of the m side's rows into registers and split them there (each float32 to its nearest tf32
and what is left); fence the splits for the asynchronous proxy that wgmma reads through, and
meet again; start copying the k-tile ``buffers - 1`` ahead into the slot the last k-tile's
wgmma read; then start the warpgroup's three wgmma per eight k into the k-tile's sum. After
the last k-tile, wait for its wgmma and add their sum. The prologue, the copies' guards and
the epilogue are the FMA kernels' (``contraction.lowering.ContractionWriter``), the register tile being
the wgmma's accumulators.

With 16-bit operands (``SixteenBitWarpgroupWriter``) there is nothing to split: per k-tile, wait
for its copies and for the last k-tile's wgmma, fence the copies for the asynchronous proxy and
meet at a barrier, start copying the k-tile ``buffers - 1`` ahead into the slot the last
k-tile's wgmma read, and start the warpgroup's four wgmma m64nNk16 on the k-tile, adding
straight into the accumulators.
"""

from __future__ import annotations

from lamina.core.ir import expr as ex, kernel_ir
from lamina.core.ir.expr import Expr
from lamina.plugins.schedules.contraction.mma_sync import products as mma_sync
from lamina.plugins.schedules.contraction.wgmma import products as wgmma_products
from lamina.plugins.schedules.contraction.lowering import ContractionWriter

PIECE_PAIRS = (("small", "big"), ("big", "small"), ("big", "big"))
"""The three products of each eight k, the small ones first, as (m side, n side)."""


class StagedWarpgroupWriter(ContractionWriter):
    """What the writers of wgmma on operands the threads stage share: the two staged sides and
    each thread's warpgroup."""

    K_AXIS = 1
    """Staged tiles are K-major, row by row, as wgmma reads them."""
    staged_position = staticmethod(wgmma_products.staged_position)
    """The m side's staged rows in the order of the wgmma's accumulators."""

    def __init__(self, tile, c, taken=frozenset()):
        super().__init__(tile, c, taken)
        self.m_side, self.n_side = wgmma_products.factors(c)
        self.m_stage = next(s for s in tile.stages if s.index == self.m_side.text)
        self.n_stage = next(s for s in tile.stages if s.index == self.n_side.text)
        self.warpgroup = ex.Var(self.names.fresh("warpgroup"))
        self.ranges[self.warpgroup.name] = self.threads // kernel_ir.WARPGROUP_SIZE

    def prologue(self) -> list[kernel_ir.Stmt]:
        warpgroup = kernel_ir.Declare(self.warpgroup.name, self.warpgroup.dtype, self.tid // kernel_ir.WARPGROUP_SIZE)
        return super().prologue() + [warpgroup]

    def shared_arrays(self) -> list[kernel_ir.Array]:
        """The staged k-tiles, swizzled."""
        return [kernel_ir.Array(self.tiles[s.index], s.dtype, s.padded_shape, "shared", swizzle=s.swizzle)
                for s in self.tile.stages]


class WarpgroupWriter(StagedWarpgroupWriter):
    """Writes the Kernel IR of a float32 contraction scheduled onto wgmma."""

    def __init__(self, tile, c, taken=frozenset()):
        super().__init__(tile, c, taken)
        self.n_small = self.names.fresh(f"{self.n_stage.buffer}_small")
        self.fragments = {p: self.names.fresh(f"a_{p}") for p in ("big", "small")}
        self.step_sum = self.names.fresh("k_tile_sum")
        self.step = ex.Var(self.names.fresh("step"))
        self.pieces = {p: self.names.fresh(f"{p}_piece") for p in ("raw", "big", "small")}
        self.ranges[self.step.name] = wgmma_products.BLOCK_K // kernel_ir.WGMMA_K

    # --- a k-tile ------------------------------------------------------------------

    def _fragments(self, slot: Expr) -> list[kernel_ir.Stmt]:
        """Each thread's values of A for the k-tile's wgmma, read from the m side's staged rows
        and split in registers: for the eight k from ``8 j``, value ``i`` of lane ``4 g + t`` of
        the warpgroup's warp ``w`` is row ``16 w + g + 8 (i % 2)``, column ``8 j + t + 4 (i // 2)``
        (``kernel_ir.WgmmaTf32`` with A from registers). A warp's 32 reads of one value are eight rows of four
        columns, one 16-byte chunk of each row; the swizzle puts the eight in different banks."""
        warp = self.tid % kernel_ir.WARPGROUP_SIZE // 32
        first_row = self.warpgroup * kernel_ir.WGMMA_M + warp * 16 + self.tid % 32 // 4
        big, small = self.fragments["big"], self.fragments["small"]
        dtype = self.c.acc_dtype
        body: list[kernel_ir.Stmt] = []
        for i in range(4):
            row = first_row + 8 * (i % 2)
            column = self.tid % 4 + self.step * kernel_ir.WGMMA_K + 4 * (i // 2)
            at = (self.step, ex.const(i))
            raw = kernel_ir.Load(self.tiles[self.m_stage.index], (slot, row, column), self.m_stage.dtype)
            body += [kernel_ir.Store(small, at, raw),
                     kernel_ir.Store(big, at, mma_sync.big_piece(kernel_ir.Load(small, at, dtype))),
                     kernel_ir.Store(small, at, ex.op("sub", kernel_ir.Load(small, at, dtype),
                                                      kernel_ir.Load(big, at, dtype)))]
        steps = wgmma_products.BLOCK_K // kernel_ir.WGMMA_K
        return [kernel_ir.For(self.step.name, ex.const(0), ex.const(steps), 1, body, unroll=True)]

    def _split(self, slot: Expr, half: Expr) -> list[kernel_ir.Stmt]:
        """Every staged element of the n side's k-tile ``slot`` to its nearest tf32 in place,
        what is left to the small pieces, 16 bytes a thread at a time: a warp's 32 chunks are
        four whole rows, which its 16-byte reads and writes cover without a bank conflict,
        swizzled or not."""
        width = wgmma_products.COPY_ELEMENTS
        chunks = wgmma_products.BLOCK_K // width
        lanes = [(ex.const(i),) for i in range(width)]
        first = (ex.const(0),)
        stage = self.n_stage
        rounds = stage.tile[0] * chunks // self.threads
        e = self.tid + self.round * self.threads
        row, word = e // chunks, e % chunks * width
        staged = (slot, row, word)
        body: list[kernel_ir.Stmt] = [kernel_ir.VectorLoad(self.pieces["raw"], first, self.tiles[stage.index],
                                                           staged, width)]
        for at in lanes:
            raw = kernel_ir.Load(self.pieces["raw"], at, stage.dtype)
            big = kernel_ir.Load(self.pieces["big"], at, stage.dtype)
            body += [kernel_ir.Store(self.pieces["big"], at, mma_sync.big_piece(raw)),
                     kernel_ir.Store(self.pieces["small"], at, ex.op("sub", raw, big))]
        body += [kernel_ir.VectorStore(self.tiles[stage.index], staged, self.pieces["big"], first, width),
                 kernel_ir.VectorStore(self.n_small, (half, row, word), self.pieces["small"], first, width)]
        return [kernel_ir.For(self.round.name, ex.const(0), ex.const(rounds), 1, body, unroll=True)]

    def _b_operand(self, piece: str, slot: Expr, half: Expr, k: int) -> tuple[str, tuple[Expr, ...]]:
        if piece == "big":
            return self.tiles[self.n_stage.index], (slot, ex.const(0), ex.const(k))
        return self.n_small, (half, ex.const(0), ex.const(k))

    def _products(self, slot: Expr, half: Expr) -> list[kernel_ir.Stmt]:
        """The warpgroup's three wgmma per eight k of the k-tile, summed from zero and
        committed; the next k-tile adds the sum to the accumulators once they are done."""
        n = self.cols.block_tile
        accumulators = [(ex.const(p % 4 // 2), ex.const(p // 4 * 2 + p % 2)) for p in range(n // 2)]
        dtype = self.c.acc_dtype
        out: list[kernel_ir.Stmt] = [kernel_ir.WgmmaFence()]
        for k in range(0, self.block_k, kernel_ir.WGMMA_K):
            j = k // kernel_ir.WGMMA_K
            for a_piece, b_piece in PIECE_PAIRS:
                a = [kernel_ir.Load(self.fragments[a_piece], (ex.const(j), ex.const(i)), dtype) for i in range(4)]
                b, b_index = self._b_operand(b_piece, slot, half, k)
                accumulate = bool(k) or (a_piece, b_piece) != PIECE_PAIRS[0]
                out.append(kernel_ir.WgmmaTf32(self.step_sum, accumulators, a, (), b, b_index, n, accumulate,
                                               a_from="registers"))
        return out + [kernel_ir.WgmmaCommit()]

    def _add_step_sum(self) -> list[kernel_ir.Stmt]:
        """Wait for the last k-tile's wgmma, and add their sum to the accumulators."""
        out: list[kernel_ir.Stmt] = [kernel_ir.WgmmaWait(0)]
        for a, b in self.register_tile():
            at = (ex.const(a), ex.const(b))
            total = ex.op("add", self.accumulator(a, b), kernel_ir.Load(self.step_sum, at, self.c.acc_dtype))
            out.append(kernel_ir.Store(self.acc, at, total))
        return out

    def k_tile(self, waits: list[kernel_ir.Stmt], refill: kernel_ir.Stmt, slot: Expr) -> list[kernel_ir.Stmt]:
        """K-tile ``kt`` from ``slot``: landed; B split in place while the last k-tile's wgmma
        still run, its small pieces to the half of their array that those do not read; then
        the last k-tile's sum added, A read into registers and split there, the splits fenced
        for the asynchronous proxy, the copy of a k-tile ahead started into the slot that the
        last k-tile's wgmma read, and the k-tile's wgmma started."""
        half = self.kt % 2
        return [*waits, kernel_ir.Barrier(), *self._split(slot, half), *self._add_step_sum(),
                *self._fragments(slot), kernel_ir.AsyncProxyFence(), kernel_ir.Barrier(), refill,
                *self._products(slot, half)]

    def main_loop(self) -> list[kernel_ir.Stmt]:
        """The k-tiles, then the last one's sum, once its wgmma are done."""
        return super().main_loop() + self._add_step_sum()

    def prologue(self) -> list[kernel_ir.Stmt]:
        zero = ex.cast(ex.const(0), self.c.acc_dtype)
        no_sum_yet = [kernel_ir.Store(self.step_sum, (ex.const(a), ex.const(b)), zero) for a, b in self.register_tile()]
        return super().prologue() + no_sum_yet

    # --- arrays --------------------------------------------------------------------

    def shared_arrays(self) -> list[kernel_ir.Array]:
        """The staged k-tiles and the n side's small pieces, swizzled."""
        stage = self.n_stage
        return super().shared_arrays() + [
            kernel_ir.Array(self.n_small, stage.dtype, (2, *stage.tile), "shared", swizzle=stage.swizzle)]

    def fragment_arrays(self) -> list[kernel_ir.Array]:
        """The k-tile's sum of products, beside the accumulators; the thread's values of A, big
        and small, four for each eight k; and a 16-byte chunk of the n side's split as read, its
        big pieces and its small ones."""
        tile = (self.rows.per_thread, self.cols.per_thread)
        values = (wgmma_products.BLOCK_K // kernel_ir.WGMMA_K, 4)
        chunk = (wgmma_products.COPY_ELEMENTS,)
        return [kernel_ir.Array(self.step_sum, self.c.acc_dtype, tile, "register"),
                *(kernel_ir.Array(name, self.c.acc_dtype, values, "register") for name in self.fragments.values()),
                *(kernel_ir.Array(name, self.c.acc_dtype, chunk, "register") for name in self.pieces.values())]


class SixteenBitWarpgroupWriter(StagedWarpgroupWriter):
    """Writes the Kernel IR of a contraction of bf16 or fp16 operands scheduled onto wgmma, both
    operands staged in swizzled shared memory by the block's threads."""

    def copy_masks(self) -> dict[str, Expr]:
        """The operands' conditions (``wgmma.products.masks``): wgmma multiplies what is staged."""
        return wgmma_products.masks(self.c)

    def _products(self, slot: Expr) -> list[kernel_ir.Stmt]:
        """The warpgroup's wgmma over the k-tile in ``slot``, its 64 staged rows of the m side by
        every staged row of the n side, added into the accumulators, and committed."""
        n = self.cols.block_tile
        accumulators = [(ex.const(p % 4 // 2), ex.const(p // 4 * 2 + p % 2)) for p in range(n // 2)]
        dtype = self.m_stage.dtype
        first_row = self.warpgroup * kernel_ir.WGMMA_M
        out: list[kernel_ir.Stmt] = [kernel_ir.WgmmaFence()]
        for k in range(0, self.block_k, kernel_ir.wgmma_k(dtype)):
            out.append(kernel_ir.Wgmma(self.acc, accumulators, self.tiles[self.m_stage.index],
                                       (slot, first_row, ex.const(k)), self.tiles[self.n_stage.index],
                                       (slot, ex.const(0), ex.const(k)), n, operand_dtype=dtype))
        return out + [kernel_ir.WgmmaCommit()]

    def k_tile(self, waits: list[kernel_ir.Stmt], refill: kernel_ir.Stmt, slot: Expr) -> list[kernel_ir.Stmt]:
        """K-tile ``kt`` from ``slot``: landed, the last k-tile's wgmma done, the copies fenced for
        the asynchronous proxy that wgmma reads through; after the barrier no warpgroup reads the
        last k-tile's slot, which the copy of a k-tile ahead then refills while this one's wgmma run."""
        return [*waits, kernel_ir.WgmmaWait(0), kernel_ir.AsyncProxyFence(), kernel_ir.Barrier(), refill,
                *self._products(slot)]

    def main_loop(self) -> list[kernel_ir.Stmt]:
        """The k-tiles, then a wait for the last one's wgmma before the epilogue reads the sums."""
        return super().main_loop() + [kernel_ir.WgmmaWait(0)]

    def fragment_arrays(self) -> list[kernel_ir.Array]:
        """None: wgmma reads both operands from shared memory."""
        return []

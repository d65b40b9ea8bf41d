"""The contraction's Tile IR written as Kernel IR where its products run on wgmma.

Per k-tile (``warpgroup_products`` says why each piece is there): wait for its copies and
meet at a barrier; split it in place, every thread 16 bytes at a time (each float32 to its
nearest tf32, what is left to the small pieces' array); fence those writes
for the asynchronous proxy that wgmma reads through, and meet again; start copying the
k-tile ``buffers - 1`` ahead into the slot the last k-tile's wgmma read; then each
warpgroup runs its three wgmma per eight k into the k-tile's sum, waits for them, and adds
the sum to its accumulators. The prologue, the copies' guards and the epilogue are the
FMA kernels' (``lowering.ContractionWriter``), the register tile being the wgmma's
accumulators.
"""

from __future__ import annotations

from lamina.core.ir import expr as ex, kernel_ir
from lamina.core.ir.expr import Expr
from lamina.plugins.schedules.contraction import tensor_cores, warpgroup_products
from lamina.plugins.schedules.contraction.lowering import ContractionWriter

PIECE_PAIRS = (("small", "big"), ("big", "small"), ("big", "big"))
"""The three products of each eight k, the small ones first, as (m side, n side)."""


class WarpgroupWriter(ContractionWriter):
    """Writes the Kernel IR of a contraction scheduled onto wgmma."""

    K_AXIS = 1
    """Staged tiles are K-major, row by row, as wgmma reads them."""

    def __init__(self, tile, c, taken=frozenset()):
        super().__init__(tile, c, taken)
        self.m_side, self.n_side = tensor_cores.factors(c)
        self.small = {s.index: self.names.fresh(f"{s.buffer}_small") for s in tile.stages}
        self.step_sum = self.names.fresh("k_tile_sum")
        self.warpgroup = ex.Var(self.names.fresh("warpgroup"))
        self.pieces = {p: self.names.fresh(f"{p}_piece") for p in ("raw", "big", "small")}
        self.ranges[self.warpgroup.name] = self.threads // kernel_ir.WARPGROUP_SIZE

    # --- copies ------------------------------------------------------------------

    def _tile_row_of(self, side: str, staged: Expr) -> Expr:
        """On the m side a staged row holds the block row that the wgmma's accumulators put
        there (``warpgroup_products.staged_row``); on the n side, the same column."""
        return warpgroup_products.staged_row(staged, self.rows.block_tile) if side == "m" else staged

    # --- a k-tile ------------------------------------------------------------------

    def _split(self, slot: Expr) -> list[kernel_ir.Stmt]:
        """Every staged element of k-tile ``slot`` to its nearest tf32 in place, what is left to
        the small pieces, 16 bytes a thread at a time: a warp's 32 chunks are four whole rows,
        which its 16-byte reads and writes cover without a bank conflict, swizzled or not."""
        out: list[kernel_ir.Stmt] = []
        width = warpgroup_products.COPY_ELEMENTS
        chunks = warpgroup_products.BLOCK_K // width
        lanes = [(ex.const(i),) for i in range(width)]
        first = (ex.const(0),)
        for stage in self.tile.stages:
            rounds = stage.tile[0] * chunks // self.threads
            e = self.tid + self.round * self.threads
            row, word = e // chunks, e % chunks * width
            staged = (slot, row, word)
            body: list[kernel_ir.Stmt] = [kernel_ir.VectorLoad(self.pieces["raw"], first, self.tiles[stage.index],
                                                               staged, width)]
            for at in lanes:
                raw = kernel_ir.Load(self.pieces["raw"], at, stage.dtype)
                big = kernel_ir.Load(self.pieces["big"], at, stage.dtype)
                body += [kernel_ir.Store(self.pieces["big"], at, kernel_ir.Tf32(raw)),
                         kernel_ir.Store(self.pieces["small"], at, ex.op("sub", raw, big))]
            body += [kernel_ir.VectorStore(self.tiles[stage.index], staged, self.pieces["big"], first, width),
                     kernel_ir.VectorStore(self.small[stage.index], (row, word), self.pieces["small"], first, width)]
            out.append(kernel_ir.For(self.round.name, ex.const(0), ex.const(rounds), 1, body, unroll=True))
        return out

    def _operand(self, side, piece: str, slot: Expr, row: Expr, k: int) -> tuple[str, tuple[Expr, ...]]:
        if piece == "big":
            return self.tiles[side.text], (slot, row, ex.const(k))
        return self.small[side.text], (row, ex.const(k))

    def _products(self, slot: Expr) -> list[kernel_ir.Stmt]:
        """The warpgroup's three wgmma per eight k of the k-tile, summed from zero, then added
        to the accumulators once they are done."""
        n = self.cols.block_tile
        accumulators = [(ex.const(p % 4 // 2), ex.const(p // 4 * 2 + p % 2)) for p in range(n // 2)]
        first_row = self.warpgroup * kernel_ir.WGMMA_M
        out: list[kernel_ir.Stmt] = [kernel_ir.WgmmaFence()]
        for k in range(0, self.block_k, kernel_ir.WGMMA_K):
            for a_piece, b_piece in PIECE_PAIRS:
                a, a_index = self._operand(self.m_side, a_piece, slot, first_row, k)
                b, b_index = self._operand(self.n_side, b_piece, slot, ex.const(0), k)
                accumulate = bool(k) or (a_piece, b_piece) != PIECE_PAIRS[0]
                out.append(kernel_ir.WgmmaTf32(self.step_sum, accumulators, a, a_index, b, b_index, n, accumulate))
        out += [kernel_ir.WgmmaCommit(), kernel_ir.WgmmaWait(0)]
        for a, b in self._register_tile():
            at = (ex.const(a), ex.const(b))
            total = ex.op("add", self._acc(a, b), kernel_ir.Load(self.step_sum, at, self.c.acc_dtype))
            out.append(kernel_ir.Store(self.acc, at, total))
        return out

    def _k_tile(self, waits: list[kernel_ir.Stmt], refill: kernel_ir.Stmt, slot: Expr) -> list[kernel_ir.Stmt]:
        """K-tile ``kt`` from ``slot``: landed, split and fenced for the asynchronous proxy, the
        copy of a k-tile ahead started, then multiplied on wgmma."""
        return [*waits, kernel_ir.Barrier(), *self._split(slot), kernel_ir.AsyncProxyFence(), kernel_ir.Barrier(),
                refill, *self._products(slot)]

    def _prologue(self) -> list[kernel_ir.Stmt]:
        warpgroup = kernel_ir.Declare(self.warpgroup.name, self.warpgroup.dtype, self.tid // kernel_ir.WARPGROUP_SIZE)
        return super()._prologue() + [warpgroup]

    # --- arrays --------------------------------------------------------------------

    def _shared_arrays(self) -> list[kernel_ir.Array]:
        """The staged k-tiles and their small pieces, swizzled."""
        arrays = []
        for s in self.tile.stages:
            arrays.append(kernel_ir.Array(self.tiles[s.index], s.dtype, s.padded_shape, "shared", swizzle=s.swizzle))
            arrays.append(kernel_ir.Array(self.small[s.index], s.dtype, s.tile, "shared", swizzle=s.swizzle))
        return arrays

    def _fragment_arrays(self) -> list[kernel_ir.Array]:
        """The k-tile's sum of products, beside the accumulators, and a 16-byte chunk of the
        split as read, its big pieces and its small ones."""
        tile = (self.rows.per_thread, self.cols.per_thread)
        chunk = (warpgroup_products.COPY_ELEMENTS,)
        return [kernel_ir.Array(self.step_sum, self.c.acc_dtype, tile, "register"),
                *(kernel_ir.Array(name, self.c.acc_dtype, chunk, "register") for name in self.pieces.values())]

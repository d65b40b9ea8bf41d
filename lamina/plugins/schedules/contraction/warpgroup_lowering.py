"""The contraction's Tile IR written as Kernel IR where its products run on wgmma.

A wgmma runs asynchronously, so each k-tile's split overlaps the wgmma of the one before
(``warpgroup_products`` says why each piece is there). Before the loop, every buffer's
k-tile is copied, and the first one, once it lands, is split in place (each float32 to its
nearest tf32, what is left to the small pieces) and fenced for the asynchronous proxy that
wgmma reads through. Then, per k-tile: each warpgroup starts its three wgmma per eight k
into the k-tile's sum; while they run, the block waits for the next k-tile, splits it (the
small pieces alternate between two arrays) and fences it; each warpgroup waits for its
wgmma and adds the sum to its accumulators; and after a barrier the k-tile's buffer takes
the copy of the k-tile ``buffers`` ahead. The prologue, the copies' guards and the epilogue
are the FMA kernels' (``lowering.ContractionWriter``), the register tile being the wgmma's
accumulators.
"""

from __future__ import annotations

from lamina.core.ir import expr as ex, index, kernel_ir
from lamina.core.ir.expr import Expr
from lamina.plugins.schedules import loop_to_kernel
from lamina.plugins.schedules.contraction import copy_layout, tensor_cores, warpgroup_products
from lamina.plugins.schedules.contraction.lowering import ContractionWriter, _and, _lt
from lamina.plugins.schedules.contraction.tiling import copy_order

PIECE_PAIRS = (("small", "big"), ("big", "small"), ("big", "big"))
"""The three products of each eight k, the small ones first, as (m side, n side)."""


class WarpgroupWriter(ContractionWriter):
    """Writes the Kernel IR of a contraction scheduled onto wgmma."""

    def __init__(self, tile, c, taken=frozenset()):
        super().__init__(tile, c, taken)
        self.m_side, self.n_side = tensor_cores.factors(c)
        self.small = {s.index: self.names.fresh(f"{s.buffer}_small") for s in tile.stages}
        self.step_sum = self.names.fresh("k_tile_sum")
        self.warpgroup = ex.Var(self.names.fresh("warpgroup"))
        self.piece = ex.Var(self.names.fresh("piece"), c.acc_dtype)
        self.ranges[self.warpgroup.name] = self.threads // kernel_ir.WARPGROUP_SIZE

    # --- copies ------------------------------------------------------------------

    def _copy_round(self, stage, kt: Expr, slot: Expr, round_: Expr) -> list[kernel_ir.Stmt]:
        """Each thread's 16-byte copy ``tid + round_ * threads`` of k-tile ``kt``: row ``r``
        and k ``k`` of the stage, from the operand's row that ``r`` holds (on the m side, in
        the order of the wgmma's accumulators, ``warpgroup_products.staged_row``)."""
        operand = self.c.operand(stage.index)
        order = copy_order(self.c, stage)
        count = copy_layout.copies(order, stage.tile)
        rounds = self._rounds(stage)
        e = self.tid + round_ * self.threads if rounds > 1 else self.tid
        ranges = {**self.ranges, self.round.name: rounds}
        row, k_in_tile = (index.simplify(x, ranges) for x in copy_layout.coordinates(order, stage.tile, e))
        k = kt * self.block_k + k_in_tile
        if operand.side == "m":
            binding, block = self.rows, self.block_row
            row_of_block = warpgroup_products.staged_row(row, binding.block_tile)
        else:
            binding, block, row_of_block = self.cols, self.block_col, row
        position = block * binding.block_tile + row_of_block
        env = {**self.batch_env, self.c.reduce_var: k, stage.dims[0]: position}
        guards = [self._k_guard(k, ranges)]
        if binding.extent % binding.block_tile:
            guards.append(_lt(position, binding.extent, ranges))
        source = loop_to_kernel.translate_expr(operand.load, self.kernel, env)
        copy: list[kernel_ir.Stmt] = [kernel_ir.CpAsync(self.tiles[stage.index], (slot, row, k_in_tile), source.array,
                                                        source.index, stage.copy_bytes, _and(guards))]
        if count % self.threads:
            copy = [kernel_ir.If(ex.op("lt", e, count), copy)]
        return copy

    # --- a k-tile ------------------------------------------------------------------

    def _split(self, slot: Expr, half: Expr) -> list[kernel_ir.Stmt]:
        """Every staged element of the k-tile in ``slot`` to its nearest tf32 in place, what is
        left to the small pieces' ``half``: a warp takes whole rows, one word per lane, which
        no two lanes of a row's 32 words share a bank for, swizzled or not."""
        out: list[kernel_ir.Stmt] = []
        for stage in self.tile.stages:
            rows = stage.tile[0]
            rounds = rows * warpgroup_products.BLOCK_K // self.threads
            e = self.tid + self.round * self.threads
            row, word = e // warpgroup_products.BLOCK_K, e % warpgroup_products.BLOCK_K
            staged = (slot, row, word)
            value = kernel_ir.Load(self.tiles[stage.index], staged, stage.dtype)
            big = kernel_ir.Tf32(self.piece)
            body = [
                kernel_ir.Declare(self.piece.name, stage.dtype, value),
                kernel_ir.Store(self.tiles[stage.index], staged, big),
                kernel_ir.Store(self.small[stage.index], (half, row, word), ex.op("sub", self.piece, big)),
            ]
            out.append(kernel_ir.For(self.round.name, ex.const(0), ex.const(rounds), 1, body, unroll=True))
        return out + [kernel_ir.AsyncProxyFence()]

    def _operand(self, side, piece: str, slot: Expr, half: Expr, row: Expr, k: int) -> tuple[str, tuple[Expr, ...]]:
        if piece == "big":
            return self.tiles[side.text], (slot, row, ex.const(k))
        return self.small[side.text], (half, row, ex.const(k))

    def _start_products(self, slot: Expr, half: Expr) -> list[kernel_ir.Stmt]:
        """The warpgroup's three wgmma per eight k of the k-tile in ``slot``, summed from zero."""
        n = self.cols.block_tile
        accumulators = [(ex.const(p % 4 // 2), ex.const(p // 4 * 2 + p % 2)) for p in range(n // 2)]
        first_row = self.warpgroup * kernel_ir.WGMMA_M
        out: list[kernel_ir.Stmt] = [kernel_ir.WgmmaFence()]
        for k in range(0, self.block_k, kernel_ir.WGMMA_K):
            for a_piece, b_piece in PIECE_PAIRS:
                a, a_index = self._operand(self.m_side, a_piece, slot, half, first_row, k)
                b, b_index = self._operand(self.n_side, b_piece, slot, half, ex.const(0), k)
                accumulate = bool(k) or (a_piece, b_piece) != PIECE_PAIRS[0]
                out.append(kernel_ir.WgmmaTf32(self.step_sum, accumulators, a, a_index, b, b_index, n, accumulate))
        return out + [kernel_ir.WgmmaCommit()]

    def _finish_products(self) -> list[kernel_ir.Stmt]:
        """Wait for the warpgroup's wgmma and add their sum to the accumulators."""
        out: list[kernel_ir.Stmt] = [kernel_ir.WgmmaWait(0)]
        for a, b in self._register_tile():
            at = (ex.const(a), ex.const(b))
            total = ex.op("add", self._acc(a, b), kernel_ir.Load(self.step_sum, at, self.c.acc_dtype))
            out.append(kernel_ir.Store(self.acc, at, total))
        return out

    def _wait_for(self, tile: Expr, copied_after: int) -> list[kernel_ir.Stmt]:
        """Wait until k-tile ``tile`` has landed, the (at most ``copied_after``) ones copied after
        it still in flight."""
        k_tiles = self.k_tiles_here
        if isinstance(tile, ex.Const) and isinstance(k_tiles, ex.Const):
            return self._wait(max(0, min(copied_after, int(k_tiles.value) - 1 - int(tile.value))))
        waits = self._wait(0)
        for j in range(1, copied_after + 1):
            waits = [kernel_ir.If(ex.op("lt", tile + j, k_tiles), self._wait(j), waits)]
        return waits

    def _main_loop(self) -> list[kernel_ir.Stmt]:
        """Every buffer filled and the first k-tile split before the loop; in it, each k-tile's
        wgmma run while the next k-tile is split."""
        kt, k_tiles, buffers = self.kt, self.k_tiles_here, self._buffers
        slot, next_slot = ex.Var(self.names.fresh("slot")), ex.Var(self.names.fresh("next_slot"))
        first = []
        for j in range(min(buffers, self.k_tiles)):
            issue = self._issue(ex.const(j), ex.const(j))
            first += [kernel_ir.If(ex.op("lt", ex.const(j), k_tiles), issue)] if self._k_tiles_vary else issue
        zero = ex.const(0)
        split_first = [*self._wait_for(zero, buffers - 1), kernel_ir.Barrier(), *self._split(zero, zero), kernel_ir.Barrier()]
        if self._k_tiles_vary:
            split_first = [kernel_ir.If(ex.op("lt", zero, k_tiles), split_first)]
        split_next = [*self._wait_for(kt + 1, buffers - 2), kernel_ir.Barrier(), *self._split(next_slot, (kt + 1) % 2)]
        body = [
            kernel_ir.Declare(next_slot.name, next_slot.dtype,
                              ex.op("where", ex.op("eq", slot, buffers - 1), zero, slot + 1)),
            *self._start_products(slot, kt % 2),
            kernel_ir.If(ex.op("lt", kt + 1, k_tiles), split_next),
            *self._finish_products(),
            kernel_ir.Barrier(),
            kernel_ir.If(ex.op("lt", kt + buffers, k_tiles), self._issue(kt + buffers, slot)),
            kernel_ir.Assign(slot.name, next_slot),
        ]
        return first + split_first + [kernel_ir.Declare(slot.name, slot.dtype, zero), self._k_tile_loop(body)]

    def _prologue(self) -> list[kernel_ir.Stmt]:
        warpgroup = kernel_ir.Declare(self.warpgroup.name, self.warpgroup.dtype, self.tid // kernel_ir.WARPGROUP_SIZE)
        return super()._prologue() + [warpgroup]

    # --- arrays --------------------------------------------------------------------

    def _shared_arrays(self) -> list[kernel_ir.Array]:
        """The staged k-tiles and two k-tiles of their small pieces, swizzled."""
        arrays = []
        for s in self.tile.stages:
            arrays.append(kernel_ir.Array(self.tiles[s.index], s.dtype, s.padded_shape, "shared", swizzle=s.swizzle))
            arrays.append(kernel_ir.Array(self.small[s.index], s.dtype, (2, *s.tile), "shared", swizzle=s.swizzle))
        return arrays

    def _fragment_arrays(self) -> list[kernel_ir.Array]:
        """The k-tile's sum of products, beside the accumulators."""
        tile = (self.rows.per_thread, self.cols.per_thread)
        return [kernel_ir.Array(self.step_sum, self.c.acc_dtype, tile, "register")]

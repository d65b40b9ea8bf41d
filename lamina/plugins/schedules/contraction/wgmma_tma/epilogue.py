"""The fused epilogue of a ``products = wgmma_tma`` kernel, applied to the wgmma's accumulators.

Lane ``4 g + t`` of warp ``w`` of a consumer warpgroup holds, of each 64-row slice ``q`` of
the warpgroup's rows, ``D[16 w + g + 8 h][8 j + 2 t + e]`` in ``acc[q][4 j + 2 h + e]``
(``kernel_ir.Wgmma``). Each accumulator is the contraction's sum at that row and column of
the block: the Loop IR's epilogue (bias, residual, activation, casts) runs on it as the
other contraction kernels run it (``loop_to_kernel.translate_body``), guarded where the
block overhangs the output's rows or columns. Where every epilogue store's columns are
contiguous and the output's row length is even, the two adjacent columns ``e = 0, 1`` a
thread holds are computed into registers and written in one access
(``contraction.layout.store_width``); where the kernel sums two products side by side
(``Contraction.paired``), each output's second sum lies ``block_n / 2`` accumulators after its
first, in the same thread. Where the TMA can store the output, the values go into a
shared tile that it copies out (``tma_stores``); where they cannot start aligned, into a shared
tile that the whole block then writes out a row at a time (``staged_outputs``). In
either case the reads of other buffers may be issued before the products (``early_reads``).
"""

from __future__ import annotations

from lamina.core.ir import expr as ex, index, kernel_ir
from lamina.core.ir.expr import Expr
from lamina.plugins.schedules import loop_to_kernel
from lamina.plugins.schedules.contraction.layout import KernelNames, all_of, store_width
from lamina.plugins.schedules.contraction.recognise import Contraction
from lamina.plugins.schedules.contraction.wgmma_tma.early_reads import EarlyReads
from lamina.plugins.schedules.contraction.wgmma_tma.staged_outputs import StagedOutputs
from lamina.plugins.schedules.contraction.wgmma_tma.tma_stores import TmaStoredOutputs

COLUMN_RUN = 2


class TmaGemmEpilogue:
    """The epilogue statements and registers of one consumer thread."""

    def __init__(self, c: Contraction, names: KernelNames, tid: Expr, warpgroup: Expr, acc: str, block_m: int,
                 block_n: int, slices: int, batch_env: dict[str, Expr], block_row: Expr, block_col: Expr,
                 staged: StagedOutputs | TmaStoredOutputs | None = None, reads_early: bool = False,
                 paired_offset: int | None = None):
        self.c, self.kernel, self.acc = c, c.kernel, acc
        self.block_m, self.block_n, self.slices = block_m, block_n, slices
        self.tid, self.warpgroup, self.batch_env = tid, warpgroup, batch_env
        self.block_row, self.block_col = block_row, block_col
        self.row, self.col = ex.Var(names.fresh("row")), ex.Var(names.fresh("col"))
        self.tile_row, self.tile_col = ex.Var(names.fresh("tile_row")), ex.Var(names.fresh("tile_col"))
        self.staged = staged
        self.width = store_width(c, COLUMN_RUN) if staged is None else (COLUMN_RUN if staged.stores_pairs else 1)
        self.outputs = [names.fresh(f"{s.buffer}_out") for s in c.epilogue] if self.width > 1 else []
        self.early = (EarlyReads({b.name for b in c.kernel.inputs}, self.row.name, names.fresh)
                      if reads_early and (self.width > 1 or staged is not None) else None)
        self._statements: list[kernel_ir.Stmt] | None = None
        self.paired_offset = paired_offset
        """Where the kernel sums two products side by side (``Contraction.paired``): how many
        accumulators after an output's first sum its second lies. Such an epilogue checks its
        columns even where the blocks divide them: without that check ptxas serialised the wgmma
        of every such kernel compiled (its warning C7514), with it none
        (``test_blocks_that_divide_the_columns_keep_their_wgmma_unserialised``)."""

    def _first(self) -> list[kernel_ir.Stmt]:
        """The thread's first row and column in the output (and in the block, where its values go into
        the TMA's tile: indexed from these, a put costs a few additions, where the output's row and
        column less the block's corner cost divisions that the printer cannot fold)."""
        lane = self.tid % kernel_ir.WARP_SIZE
        warp = self.tid % kernel_ir.WARPGROUP_SIZE // kernel_ir.WARP_SIZE
        row_in_block = self.warpgroup * (kernel_ir.WGMMA_M * self.slices) + warp * 16 + lane // 4
        col_in_block = lane % 4 * COLUMN_RUN
        out = [kernel_ir.Declare(self.row.name, self.row.dtype, self.block_row * self.block_m + row_in_block),
               kernel_ir.Declare(self.col.name, self.col.dtype, self.block_col * self.block_n + col_in_block)]
        if isinstance(self.staged, TmaStoredOutputs):
            out += [kernel_ir.Declare(self.tile_row.name, self.tile_row.dtype, row_in_block),
                    kernel_ir.Declare(self.tile_col.name, self.tile_col.dtype, col_in_block)]
        return out

    def _env(self, row: Expr, col: Expr, q: int, p: int) -> dict[str, Expr]:
        acc = kernel_ir.Load(self.acc, (ex.const(q), ex.const(p)), self.c.acc_dtype)
        env = {**self.batch_env, self.c.m: row, self.c.n: col, self.c.acc: acc}
        if self.paired_offset is not None:
            env[self.c.paired.acc] = kernel_ir.Load(self.acc, (ex.const(q), ex.const(p + self.paired_offset)),
                                                    self.c.acc_dtype)
        return env

    def _guard(self, row: Expr, col: Expr) -> Expr | None:
        parts = []
        if self.c.extents[self.c.m] % self.block_m:
            parts.append(ex.op("lt", row, self.c.extents[self.c.m]))
        if self.c.extents[self.c.n] % self.block_n or self.paired_offset is not None:
            parts.append(ex.op("lt", col, self.c.extents[self.c.n]))
        return all_of(parts)

    def _built(self) -> list[kernel_ir.Stmt]:
        """The whole epilogue, its first row and column declared first, built once: its early
        reads are gathered as it is."""
        if self._statements is None:
            self._statements = self._build()
        return self._statements

    def _reads_early(self) -> bool:
        self._built()
        return self.early is not None and bool(self.early.reads)

    def before_products(self) -> list[kernel_ir.Stmt]:
        """What the thread does before its first k-tile: its first row and column and its early
        reads (``early_reads``), where it has any."""
        return [*self._built()[:self._declared], *self.early.reads] if self._reads_early() else []

    def statements(self) -> list[kernel_ir.Stmt]:
        """The epilogue, after the last k-tile."""
        return self._built()[self._declared:] if self._reads_early() else self._built()

    def _value(self, value: Expr, guard: Expr | None) -> Expr:
        """An epilogue value, reading registers where the early reads took its reads."""
        return value if self.early is None else self.early.replaced(value, guard)

    def _build(self) -> list[kernel_ir.Stmt]:
        out = self._first()
        self._declared = len(out)
        for q in range(self.slices):
            for h in range(2):
                row = self.row + (kernel_ir.WGMMA_M * q + 8 * h)
                for j in range(self.block_n // 8):
                    col = self.col + 8 * j
                    guard = self._guard(row, col)
                    if self.width > 1:
                        at = (self.tile_row + (kernel_ir.WGMMA_M * q + 8 * h), 8 * j)
                        out += self._vector_stores(row, col, q, 4 * j + 2 * h, guard, at)
                        continue
                    if self.staged is not None:
                        out += self._staged_stores(row, col, q, 4 * j + 2 * h)
                        continue
                    for e in range(COLUMN_RUN):
                        env = self._env(row, col + e, q, 4 * j + 2 * h + e)
                        out += loop_to_kernel.translate_body(self.c.epilogue, self.kernel, env,
                                                             guard=self._guard(row, col + e))
        return out

    def _staged_stores(self, row: Expr, col: Expr, q: int, p: int) -> list[kernel_ir.Stmt]:
        """The two adjacent outputs from ``(row, col)`` into the block's shared tile (``staged_outputs``),
        each where it lies inside the output (past the edge, its epilogue may read past its inputs')."""
        out: list[kernel_ir.Stmt] = []
        (store,) = self.c.epilogue
        for e in range(COLUMN_RUN):
            env = self._env(row, col + e, q, p + e)
            guard = self._guard(row, col + e)
            value = self._value(loop_to_kernel.translate_expr(store.value, self.kernel, env), guard)
            put = self.staged.put(row - self.block_row * self.block_m, col + e - self.block_col * self.block_n, value)
            out.append(kernel_ir.If(guard, [put]) if guard is not None else put)
        return out

    def _vector_stores(self, row: Expr, col: Expr, q: int, p: int, guard: Expr | None,
                       at: tuple[Expr, int]) -> list[kernel_ir.Stmt]:
        """Each epilogue store of the two adjacent outputs from ``(row, col)``: computed into registers, then
        written in one access (into the shared tile, where the TMA stores it)."""
        body: list[kernel_ir.Stmt] = []
        for store, register in zip(self.c.epilogue, self.outputs):
            for e in range(COLUMN_RUN):
                env = self._env(row, col + e, q, p + e)
                body.append(kernel_ir.Store(register, (ex.const(e),), self._value(
                    loop_to_kernel.translate_expr(store.value, self.kernel, env), guard)))
            if self.staged is not None:
                body.append(self.staged.put_pair(at[0], self.tile_col, at[1], register))
                continue
            env = self._env(row, col, q, p)
            coords = tuple(loop_to_kernel.translate_expr(i, self.kernel, env) for i in store.index)
            offset = index.linearize(coords, self.kernel.buffer(store.buffer).type.shape)
            body.append(kernel_ir.VectorStore(store.buffer, (offset,), register, (ex.const(0),), COLUMN_RUN))
        return [kernel_ir.If(guard, body)] if guard is not None else body

    def arrays(self) -> list[kernel_ir.Array]:
        self._built()
        early = self.early.arrays() if self.early is not None else []
        return [kernel_ir.Array(name, self.kernel.buffer(store.buffer).type.dtype, (COLUMN_RUN,), "register")
                for store, name in zip(self.c.epilogue, self.outputs)] + early

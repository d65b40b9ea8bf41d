"""The last block along a block's rows to finish reduces them, where no cluster holds a row.

A cluster's blocks wait for each other at its barriers, and on the H200 clusters of 16
filled the SMs too poorly to pay (``tiling.MAX_FUSED_WGMMA_ROW_LENGTH``). Here no block
waits. Each block of a band (the blocks along the same rows) stores its elements of the
product where the kernel's store puts its result, fences them, and adds one to the band's
counter, a scratch array zeroed for each launch; the block that finds itself the band's last
reads the band's rows back, a warp per row, through L2, where they still are, runs the
row's reductions over the row in registers and overwrites the elements with the results,
marked evict-first so that they leave L2 before the elements still to be read. On the H200
this took TinyLlama's and Qwen's attention scores at S = 2048 about 10 % under the time of the
product and the softmax as two kernels; without the evict-first stores, three quarters of the
elements left L2 before their band's last block read them. Where a mask on the coordinates
fixes elements to a constant (a causal mask's ``-inf``), the blocks all of whose elements it
fixes store nothing, and the last block holds the constant for each run of a lane that the
mask fixes instead of reading it back (``skipped_elements``): the causal scores took 3 to 7 %
less time than as two kernels (``experiments/attention_scores/``)::

    ... the block's product, each element computed and stored in out ...
    fence global memory for the grid; barrier
    if tid == 0:  done[0] = atomic add(band_counters[band], 1);  last[0] = done[0] == blocks - 1
    barrier
    if last[0] != 0:
      fence global memory for the grid
      for round in 0..rows / warps:       a warp's row of the band
        vector load x4 through L2 row_values[4 j] <- out[row, 128 j + 4 lane]  ... each reduce loop,
        each lane's part then shuffles across the warp; the stores, evict-first
"""

from __future__ import annotations

import math

import attrs

from lamina.core.ir import dtypes, expr as ex, index, kernel_ir, loop_ir
from lamina.core.ir.expr import Expr
from lamina.plugins.schedules import loop_to_kernel, reciprocals
from lamina.plugins.schedules.coordinate_conditions import decidable, holds_over
from lamina.plugins.schedules.contraction import unneeded_where as contraction_unneeded_where
from lamina.plugins.schedules.contraction import BlockLayout
from lamina.plugins.schedules.matmul_row_reduction.recognise import ContractionRows
from lamina.plugins.schedules.matmul_row_reduction.row_registers import RowRegisters

LANES = kernel_ir.WARP_SIZE
WIDTH = 4
"""Elements a lane reads and writes at a time: 16 bytes of float32."""


def skipped_elements(rows: ContractionRows) -> tuple[Expr, Expr] | None:
    """Where the elements do not use the product, and their value there, when that value reads
    no memory (a causal mask's ``-inf``): the blocks all of whose elements are such store
    nothing, and the band's last block holds the value instead of reading them back. None
    where the elements give no such condition and value."""
    condition = unneeded_where(rows)
    element = rows.element
    while isinstance(element, ex.Op) and element.op == "cast":
        element = element.args[0]
    if condition is None or not decidable(condition) or not (isinstance(element, ex.Op) and element.op == "where"):
        return None
    acc = rows.contraction.acc
    unused = [branch for branch in element.args[1:] if acc not in ex.free_vars(branch)]
    if len(unused) != 1 or any(isinstance(n, loop_ir.Load) for n in ex.walk(unused[0])):
        return None
    return condition, ex.cast(unused[0], rows.element.dtype)


def unneeded_where(rows: ContractionRows) -> Expr | None:
    """Where the elements that the blocks store do not use the product (a causal mask's
    ``-inf``): a block all of whose elements are such runs no k-tile, as the contraction's
    blocks do (``contraction.unneeded_blocks``)."""
    c = rows.contraction
    (store,) = c.epilogue
    return contraction_unneeded_where(attrs.evolve(c, epilogue=(attrs.evolve(store, value=rows.element),)))


class LastBlockOfRows:
    """The statements and arrays that the rows writer adds, for a block laid out as ``layout``
    whose rows' reductions run in ``registers``, so that the last block along each block's rows
    to finish reduces them and overwrites ``final_store``'s elements with the results."""

    def __init__(self, layout: BlockLayout, registers: RowRegisters, rows: ContractionRows,
                 final_store: loop_ir.Store):
        self.w = layout
        self.registers = registers
        self.rows_of = rows
        self.final = final_store
        names = layout.names
        self.counters = names.fresh("band_counters")
        self.done = names.fresh("blocks_done")
        self.last = names.fresh("last_of_band")
        self.values = names.fresh("row_values")
        self.results = names.fresh("row_results")
        self.round = ex.Var(names.fresh("band_round"))
        grid = layout.grid
        self.blocks = grid["x"]
        self.bands = grid["y"] * grid["z"]
        self.warps = layout.threads // LANES
        self.block_rows = layout.rows.block_tile
        self.rounds = math.ceil(self.block_rows / self.warps)
        self.length = layout.cols.extent
        self.chunks = math.ceil(self.length / (LANES * WIDTH))
        self.skipped = skipped_elements(rows)

    def statements(self) -> list[kernel_ir.Stmt]:
        """After the block's stores: count the block done, and finish the band if it was the last."""
        w = self.w
        band = w.batch * w.grid["y"] + w.block_row if w.contraction.batch else w.block_row
        int32 = dtypes.int32
        done = kernel_ir.Load(self.done, (ex.const(0),), int32)
        was_last = ex.op("where", ex.op("eq", done, ex.const(self.blocks - 1, int32)), ex.const(1, int32),
                         ex.const(0, int32))
        count = [kernel_ir.AtomicAdd(self.done, (ex.const(0),), self.counters, band, ex.const(1, int32)),
                 kernel_ir.Store(self.last, (ex.const(0),), was_last)]
        finish = [kernel_ir.ThreadFence(),
                  kernel_ir.For(self.round.name, ex.const(0), ex.const(self.rounds), 1, self._row())]
        return [kernel_ir.ThreadFence(), kernel_ir.Barrier(), kernel_ir.If(ex.op("eq", w.tid, 0), count),
                kernel_ir.Barrier(),
                kernel_ir.If(ex.op("ne", kernel_ir.Load(self.last, (ex.const(0),), int32), ex.const(0, int32)), finish)]

    def _row(self) -> list[kernel_ir.Stmt]:
        """A warp's row of the band: read, reduced, written."""
        w = self.w
        band_row = self.round * self.warps + w.tid // LANES
        row = w.block_row * self.block_rows + band_row
        guards = []
        if self.block_rows % self.warps:
            guards.append(ex.op("lt", band_row, self.block_rows))
        if w.rows.extent % self.block_rows:
            guards.append(ex.op("lt", row, w.rows.extent))
        body = self._loads(row) + self._reductions(row) + self._reciprocals() + self._stores(row)
        if not guards:
            return body
        guard = guards[0] if len(guards) == 1 else ex.op("and", *guards)
        return [kernel_ir.If(guard, body)]

    def _column(self, j: int) -> Expr:
        return ex.const(j * LANES * WIDTH) + self.w.tid % LANES * WIDTH

    def _in_row(self, j: int, body: list[kernel_ir.Stmt]) -> list[kernel_ir.Stmt]:
        if self.length % (LANES * WIDTH) == 0:
            return body
        return [kernel_ir.If(ex.op("lt", self._column(j), self.length), body)]

    def _env(self, row: Expr, j: int, e: int) -> dict[str, Expr]:
        w = self.w
        c = w.contraction
        env: dict[str, Expr] = {**w.batch_env, c.m: row, c.n: self._column(j) + e,
                                c.acc: kernel_ir.Load(self.values, (ex.const(j * WIDTH + e),), self.rows_of.element.dtype)}
        env.update(self.registers.environment(0))
        return env

    def _offset(self, row: Expr, j: int) -> Expr:
        w = self.w
        env = self._env(row, j, 0)
        coords = tuple(loop_to_kernel.translate_expr(i, w.contraction.kernel, env) for i in self.final.index)
        return index.linearize(coords, w.contraction.kernel.buffer(self.final.buffer).type.shape)

    def _loads(self, row: Expr) -> list[kernel_ir.Stmt]:
        """Each lane's runs of the row read back, but for a run whose elements the blocks need not
        have stored (``skipped_elements``): it holds their value instead."""
        out: list[kernel_ir.Stmt] = []
        for j in range(self.chunks):
            load: list[kernel_ir.Stmt] = [kernel_ir.VectorLoad(self.values, (ex.const(j * WIDTH),), self.final.buffer,
                                                               (self._offset(row, j),), WIDTH, cache="l2")]
            out += self._in_row(j, self._unless_skipped(row, j, load))
        return out

    def _unless_skipped(self, row: Expr, j: int, load: list[kernel_ir.Stmt]) -> list[kernel_ir.Stmt]:
        """``load`` of run ``j``, or its elements' value where the condition holds over the whole
        run, tested once from its first and last column."""
        if self.skipped is None:
            return load
        condition, value = self.skipped
        w = self.w
        first = self._column(j)
        box = {**{name: (e, e) for name, e in w.batch_env.items()}, w.contraction.m: (row, row),
               w.contraction.n: (first, index.simplify(first + (WIDTH - 1)))}
        whole_run = holds_over(condition, box)
        if whole_run is None:
            return load
        held = [kernel_ir.Store(self.values, (ex.const(j * WIDTH + e),),
                                loop_to_kernel.translate_expr(value, w.contraction.kernel, self._env(row, j, e)))
                for e in range(WIDTH)]
        return [kernel_ir.If(ex.op("not", whole_run), load, held)]

    def _reductions(self, row: Expr) -> list[kernel_ir.Stmt]:
        """The row's Inits and reduce loops, each lane's part then the warp's."""
        w = self.w
        out: list[kernel_ir.Stmt] = []
        for step in self.rows_of.reductions:
            if isinstance(step, loop_ir.Init):
                value = ex.cast(step.value, self.rows_of.accumulators[step.acc][1])
                out.append(kernel_ir.Store(self.registers.registers[step.acc], (ex.const(0),), value))
                continue
            for j in range(self.chunks):
                body = [self.registers.combined(s.acc, s.op, 0, loop_to_kernel.translate_expr(s.value, w.contraction.kernel,
                                                                                   self._env(row, j, e)))
                        for e in range(WIDTH) for s in step.body]
                out += self._in_row(j, body)
            lane_mask = LANES // 2
            while lane_mask:
                out += [self.registers.combined(s.acc, s.op, 0, kernel_ir.ShuffleXor(self.registers.value(s.acc, 0), lane_mask))
                        for s in step.body]
                lane_mask //= 2
        return out

    def _reciprocals(self) -> list[kernel_ir.Stmt]:
        return [kernel_ir.Store(name, (ex.const(0),), reciprocals.reciprocal(self.registers.value(acc, 0)))
                for acc, name in self.registers.reciprocals.items()]

    def _stores(self, row: Expr) -> list[kernel_ir.Stmt]:
        w = self.w
        out: list[kernel_ir.Stmt] = []
        for j in range(self.chunks):
            body: list[kernel_ir.Stmt] = [
                kernel_ir.Store(self.results, (ex.const(e),),
                                loop_to_kernel.translate_expr(self.final.value, w.contraction.kernel, self._env(row, j, e)))
                for e in range(WIDTH)]
            body.append(kernel_ir.VectorStore(self.final.buffer, (self._offset(row, j),), self.results,
                                              (ex.const(0),), WIDTH, cache="evict_first"))
            out += self._in_row(j, body)
        return out

    def param(self) -> kernel_ir.Param:
        """The bands' counters: zeroed for each launch, so that two launches never share them."""
        return kernel_ir.Param(self.counters, dtypes.int32, self.bands, writable=True, scratch=True)

    def arrays(self) -> list[kernel_ir.Array]:
        dtype = self.w.contraction.kernel.buffer(self.final.buffer).type.dtype
        return [kernel_ir.Array(self.done, dtypes.int32, (1,), "register"),
                kernel_ir.Array(self.last, dtypes.int32, (1,), "shared"),
                kernel_ir.Array(self.values, self.rows_of.element.dtype, (self.chunks * WIDTH,), "register"),
                kernel_ir.Array(self.results, dtype, (WIDTH,), "register")]

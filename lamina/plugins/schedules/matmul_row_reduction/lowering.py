"""The ``matmul_row_reduction`` schedule's Tile IR written as Kernel IR.

The product is computed exactly as the contraction schedule computes a block tile
(``contraction.lowering``, or ``contraction.wgmma.writer`` on wgmma), into each
thread's register tile ``acc``; each register
then becomes the row's element computed from it (``where(mask, -inf, acc * scale)``,
read once). Then, for each of the thread's rows ``a``::

    acc0_row[a] = -inf                                   each row accumulator's Init
    for b in columns:  if column < n:  acc0_row[a] = max(acc0_row[a], <element of r0>)
    acc0_row[a] = max(acc0_row[a], shuffle_xor(acc0_row[a], 16)) ... 1   the warp's row
    ... the next reduce loop, reading acc0_row[a] ...

and the store loops run as the contraction's epilogue, reading the row accumulators
from the same registers; a division by one of them (softmax's ``/ sum``) multiplies by its
reciprocal, computed once per row (``reciprocals``). Every lane of a warp holds part of the same rows, so the
shuffles combine whole rows; they run in every lane, outside the guards.

The lanes that share a row are a whole warp on the CUDA cores, and four lanes where the
products run on wgmma (``contraction.wgmma``), whose accumulators give each row of a block
to four lanes of one warp; the shuffles run over those lanes alone.

Where a cluster of blocks holds each row, every reduce loop ends with an exchange: the
first of each row's lanes stores the row's part in a shared array of the block, a cluster
barrier follows, each lane reads one or more blocks' parts through distributed shared
memory, and shuffles across the row's lanes combine them, so that every block gets the
same value. A last cluster barrier keeps each block's parts readable until the whole
cluster has read them.
"""

from __future__ import annotations

import attrs

from lamina.core.ir import expr as ex, kernel_ir, loop_ir, tile_ir
from lamina.core.ir.expr import Expr
from lamina.core.target import Target
from lamina.plugins.schedules import loop_to_kernel, reciprocals
from lamina.plugins.schedules.contraction import WGMMA_PRODUCTS, ContractionWriter, settings_of
from lamina.plugins.schedules.contraction.wgmma import WarpgroupWriter
from lamina.plugins.schedules.matmul_row_reduction.last_block import LastBlockOfRows, skipped_elements, unneeded_where
from lamina.plugins.schedules.matmul_row_reduction.row_registers import RowRegisters
from lamina.plugins.schedules.matmul_row_reduction.recognise import IDENTITY, ContractionRows, analyse
from lamina.plugins.schedules.matmul_row_reduction.tiling import product_tile


class _Rows:
    """What the row reductions add to a contraction writer (the class it is mixed into):
    the elements, the reductions over the registers, the reciprocals, then its epilogue."""

    def __init__(self, tile: tile_ir.TileKernel, rows: ContractionRows):
        self.rows_of = rows
        self.combined_by_last_block = tile.reduction.strategy == "last_block"
        super().__init__(product_tile(rows, tile), rows.contraction, frozenset(loop_to_kernel.names_in(rows.kernel)))
        self.row_registers = {acc: self.names.fresh(f"{acc}_row") for acc in rows.accumulators}
        self.reciprocals = {acc: self.names.fresh(f"{acc}_reciprocal")
                            for acc in reciprocals.divisors(self.c.epilogue, rows.accumulators)}
        self.registers = RowRegisters(self.row_registers, self.reciprocals, rows.accumulators)
        self.cluster = tile.reduction.cluster_blocks
        exchanged = [s.acc for step in rows.reductions if isinstance(step, loop_ir.Loop) for s in step.body]
        self.cluster_parts = {acc: self.names.fresh(f"{acc}_parts") for acc in exchanged} if self.cluster > 1 else {}
        self.c = attrs.evolve(self.c, epilogue=tuple(
            attrs.evolve(store, value=reciprocals.multiplying_by_reciprocals(store.value, self.reciprocals))
            for store in self.c.epilogue))
        self.last_block = None
        if self.combined_by_last_block:
            (final,) = self.c.epilogue
            self.last_block = LastBlockOfRows(self.layout, self.registers, rows, final)
            self.ranges[self.last_block.round.name] = self.last_block.rounds
            self.c = attrs.evolve(self.c, epilogue=(attrs.evolve(final, value=ex.Var(self.c.acc, self.c.acc_dtype)),))

    def unneeded_block(self) -> Expr | None:
        """Where the last block combines the rows, true in a block whose elements do not use
        the sum (``last_block.unneeded_where``: above a causal diagonal), which then runs no
        k-tile; else None, every element of the product feeding the rows' reductions in registers."""
        return self.at_every_output(unneeded_where(self.rows_of)) if self.combined_by_last_block else None

    def unread_block(self) -> Expr | None:
        """Where the last block combines the rows, true in a block whose elements it holds
        without reading them back (``last_block.skipped_elements``), which then stores nothing;
        else the contraction's."""
        if not self.combined_by_last_block:
            return super().unread_block()
        skipped = skipped_elements(self.rows_of)
        return None if skipped is None else self.at_every_output(skipped[0])

    def thread_env(self, a: int, b: int) -> dict:
        return {**super().thread_env(a, b), **self.registers.environment(a)}

    def epilogue(self) -> list[kernel_ir.Stmt]:
        if self.last_block is not None:
            return self._elements() + super().epilogue() + self.last_block.statements()
        return self._elements() + self._row_reductions() + self._reciprocals() + super().epilogue()

    def _reciprocals(self) -> list[kernel_ir.Stmt]:
        """``1 / acc`` once per row for each row accumulator that the stores divide by."""
        out: list[kernel_ir.Stmt] = []
        for acc in self.reciprocals:
            for a in range(self.rows.per_thread):
                value = reciprocals.reciprocal(self.registers.value(acc, a))
                out.append(kernel_ir.Store(self.reciprocals[acc], (ex.const(a),), value))
        return out

    def _elements(self) -> list[kernel_ir.Stmt]:
        """Each register of the product replaced by the row's element computed from it, once."""
        element = self.rows_of.element
        if element == ex.Var(self.c.acc, self.c.acc_dtype):
            return []
        out: list[kernel_ir.Stmt] = []
        for a, b in self.register_tile():
            env = {**self.thread_env(a, b), self.c.acc: self.accumulator(a, b)}
            store = kernel_ir.Store(self.acc, (ex.const(a), ex.const(b)),
                                    loop_to_kernel.translate_expr(element, self.kernel, env))
            guard = self.output_guard(a, b)
            out.append(kernel_ir.If(guard, (store,)) if guard is not None else store)
        return out

    def _row_reductions(self) -> list[kernel_ir.Stmt]:
        out: list[kernel_ir.Stmt] = []
        for step in self.rows_of.reductions:
            for a in range(self.rows.per_thread):
                if isinstance(step, loop_ir.Init):
                    value = ex.cast(step.value, self.rows_of.accumulators[step.acc][1])
                    out.append(kernel_ir.Store(self.row_registers[step.acc], (ex.const(a),), value))
                    continue
                out += self._reduce_row(step, a)
            if isinstance(step, loop_ir.Loop) and self.cluster > 1:
                out += self._exchange_across_the_cluster(step)
        if self.cluster > 1:
            out.append(kernel_ir.ClusterBarrier())
        return out

    def _exchange_across_the_cluster(self, loop: loop_ir.Loop) -> list[kernel_ir.Stmt]:
        """Each block's part of every row, combined with the other blocks' of the cluster: of
        ``n`` lanes reading (the row's lanes, or the cluster's blocks where fewer), lane ``l``
        reads the parts of blocks ``l % n``, ``l % n + n``, ..., and shuffles combine the ``n``
        lanes' sums, so that every lane (and every block) ends with the same value."""
        rows = range(self.rows.per_thread)
        lane = kernel_ir.thread_idx("x")
        publish = [kernel_ir.Store(self.cluster_parts[s.acc], (self.layout.row_in_block(a),), self.registers.value(s.acc, a))
                   for s in loop.body for a in rows]
        out: list[kernel_ir.Stmt] = [kernel_ir.If(ex.op("eq", lane, 0), publish), kernel_ir.ClusterBarrier()]
        ranks = 1 << (self.cluster - 1).bit_length()
        reading = min(ranks, self.cols.threads)
        for s in loop.body:
            op, dtype = self.rows_of.accumulators[s.acc]
            for a in rows:
                register = self.registers.value(s.acc, a)
                for i in range(ranks // reading):
                    rank = lane % reading + i * reading
                    part: ex.Expr = kernel_ir.ClusterLoad(self.cluster_parts[s.acc], (self.layout.row_in_block(a),), rank,
                                                          dtype)
                    if ranks > self.cluster:
                        part = ex.op("where", ex.op("lt", rank, self.cluster), part,
                                     ex.cast(ex.const(IDENTITY[op]), dtype))
                    out.append(kernel_ir.Store(register.array, register.index, part) if i == 0
                               else self.registers.combined(s.acc, s.op, a, part))
                lane_mask = 1
                while lane_mask < reading:
                    out.append(self.registers.combined(s.acc, s.op, a, kernel_ir.ShuffleXor(register, lane_mask)))
                    lane_mask *= 2
        return out

    def _reduce_row(self, loop: loop_ir.Loop, a: int) -> list[kernel_ir.Stmt]:
        """This thread's part of row ``a``, then that of the row's lanes together."""
        out: list[kernel_ir.Stmt] = []
        for b in range(self.cols.per_thread):
            env = {**self.thread_env(a, b), self.c.acc: self.accumulator(a, b)}
            body = [self.registers.combined(s.acc, s.op, a, loop_to_kernel.translate_expr(s.value, self.kernel, env))
                    for s in loop.body]
            guard = self.output_guard(a, b)
            out += [kernel_ir.If(guard, body)] if guard is not None else body
        lane_mask = self.cols.threads // 2
        while lane_mask:
            out += [self.registers.combined(s.acc, s.op, a, kernel_ir.ShuffleXor(self.registers.value(s.acc, a), lane_mask))
                    for s in loop.body]
            lane_mask //= 2
        return out

    def arrays(self) -> list[kernel_ir.Array]:
        arrays = super().arrays()
        for acc, name in [*self.row_registers.items(), *self.reciprocals.items()]:
            arrays.append(kernel_ir.Array(name, self.rows_of.accumulators[acc][1], (self.rows.per_thread,), "register"))
        for acc, name in self.cluster_parts.items():
            arrays.append(kernel_ir.Array(name, self.rows_of.accumulators[acc][1], (self.rows.block_tile,), "shared"))
        return arrays + (self.last_block.arrays() if self.last_block is not None else [])

    def kernel_ir(self, static_shared_bytes: int) -> kernel_ir.Kernel:
        kernel = super().kernel_ir(static_shared_bytes)
        params = kernel.params + ((self.last_block.param(),) if self.last_block is not None else ())
        return attrs.evolve(kernel, params=params, launch=attrs.evolve(kernel.launch, cluster=(self.cluster, 1, 1)))


class _RowsWriter(_Rows, ContractionWriter):
    """The rows of a product computed with FMAs on the CUDA cores."""


class _WarpgroupRowsWriter(_Rows, WarpgroupWriter):
    """The rows of a product computed on wgmma."""


def lower_matmul_row_reduction(tile: tile_ir.TileKernel, target: Target) -> kernel_ir.Kernel:
    writer = _WarpgroupRowsWriter if settings_of(tile).products == WGMMA_PRODUCTS else _RowsWriter
    kernel = writer(tile, analyse(tile.kernel)).kernel_ir(target.max_shared_bytes_per_block)
    kernel_ir.verify_kernel(kernel, target.max_threads_per_block, target.max_shared_bytes_optin)
    return kernel

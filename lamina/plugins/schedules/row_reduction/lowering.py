"""The row-reduction schedule's Tile IR as Kernel IR.

Block (threads, rows_per_block): ``threadIdx.y`` picks the row of the block,
``threadIdx.x`` the thread's first column; slot ``j`` of a thread is column
``threadIdx.x + j * threads``. With the row in registers::

    var row = blockIdx.x * rows_per_block + threadIdx.y
    unrolled for j in 0..elements_per_thread:           one pass over memory
      if row < rows and column < n: row_x[j] = x[...]
    var acc0 = identity
    unrolled for j ...: if ...: acc0 = max(acc0, row_x[j])
    acc0 = max(acc0, shuffle_xor(acc0, 16)) ... 1        the warp's partial, in every lane
    if threadIdx.x % 32 == 0: partial_acc0[threadIdx.y][threadIdx.x // 32] = acc0
    barrier                                              (a block per row only)
    acc0 = partial_acc0[threadIdx.y][threadIdx.x % warps]; shuffles over the warps
    ... the next reduction, then the epilogue's stores from registers

Shuffles run in every lane (never under a guard), so rows past the end still take part
in them; their loads and stores are guarded. Each reduction has its own partial-result
array, so that one barrier per reduction is enough.
"""

from __future__ import annotations

import math

from lamina.core.ir import dtypes, expr as ex, index, kernel_ir, loop_ir, tile_ir
from lamina.core.ir.expr import Expr
from lamina.core.ir.names import fresh_name
from lamina.core.target import Target
from lamina.plugins.schedules import loop_to_kernel
from lamina.plugins.schedules.row_reduction.recognise import RowReduction, analyse
from lamina.plugins.schedules.row_reduction.tiling import RowDecisions, knobs_of

WARP = kernel_ir.WARP_SIZE


def lower(tile: tile_ir.TileKernel, target: Target) -> kernel_ir.Kernel:
    return _RowLowering(analyse(tile.kernel), knobs_of(tile)).kernel()


class _RowLowering:
    def __init__(self, row: RowReduction, decisions: RowDecisions):
        self.row = row
        self.kernel_ir = row.kernel
        self.threads = decisions.threads
        self.rows_per_block = decisions.rows_per_block
        self.in_registers = decisions.row_in_registers
        self.elements = decisions.elements_per_thread(row.length)
        self.blocks = max(1, math.ceil(row.row_count / self.rows_per_block))
        self.taken = loop_to_kernel.names_in(row.kernel) | {row.column_name}
        self.arrays: list[kernel_ir.Array] = []
        self.registers: dict[tuple, str] = {}
        self.slot = ex.Var(fresh_name("j", self.taken))
        self.lane = kernel_ir.thread_idx("x")

    def kernel(self) -> kernel_ir.Kernel:
        row_var = ex.Var(fresh_name("row", self.taken))
        start = kernel_ir.block_idx("x") if self.rows_per_block == 1 else index.simplify(
            kernel_ir.block_idx("x") * self.rows_per_block + kernel_ir.thread_idx("y"))
        body: list[kernel_ir.Stmt] = [kernel_ir.Declare(row_var.name, dtypes.index, start)]
        declarations, self.env = loop_to_kernel.bind_point(self.row.rows, row_var, self.blocks * self.rows_per_block)
        body += declarations
        self.row_ok = None if self.blocks * self.rows_per_block == self.row.row_count else ex.op(
            "lt", row_var, self.row.row_count)
        if self.in_registers:
            body += self._load_row()
        for phase in self.row.phases:
            body += self._phase(phase.statement)
        return kernel_ir.Kernel(
            name=self.kernel_ir.name,
            params=loop_to_kernel.params(self.kernel_ir),
            arrays=tuple(self.arrays),
            body=tuple(body),
            launch=kernel_ir.Launch((self.blocks, 1, 1), (self.threads, self.rows_per_block, 1)),
        )

    # --- columns ------------------------------------------------------------------

    def _column(self) -> Expr:
        return index.simplify(self.lane + self.slot * self.threads)

    def _guard(self) -> Expr | None:
        conditions = [self.row_ok] if self.row_ok is not None else []
        if self.elements * self.threads != self.row.length:
            conditions.append(ex.op("lt", self._column(), self.row.length))
        if not conditions:
            return None
        return conditions[0] if len(conditions) == 1 else ex.op("and", *conditions)

    def _over_row(self, statements: list[kernel_ir.Stmt]) -> list[kernel_ir.Stmt]:
        """``statements`` for each slot of the thread, guarded by the slot being in the row."""
        guard = self._guard()
        body = tuple(statements) if guard is None else (kernel_ir.If(guard, tuple(statements)),)
        return [kernel_ir.For(self.slot.name, ex.const(0), ex.const(self.elements), 1, body,
                              unroll=self.in_registers)]

    def _load_row(self) -> list[kernel_ir.Stmt]:
        """Each row access read by several loops, loaded once into a register array."""
        column = {self.row.column_name: self._column()}
        stores = []
        for key in self.row.shared_reads:
            buffer, idx, dtype = key
            name = fresh_name(f"row_{buffer}", self.taken)
            self.registers[key] = name
            self.arrays.append(kernel_ir.Array(name, dtype, (self.elements,), "register"))
            node = loop_ir.Load(buffer, idx, dtype)
            value = loop_to_kernel.translate_expr(node, self.kernel_ir, {**self.env, **column})
            stores.append(kernel_ir.Store(name, (self.slot,), value))
        return self._over_row(stores) if stores else []

    def _from_registers(self, body: tuple[loop_ir.Stmt, ...], var: str) -> tuple[loop_ir.Stmt, ...]:
        """``body`` of the loop over ``var`` with its row accesses read from registers."""

        def replace(node: Expr) -> Expr | None:
            if isinstance(node, loop_ir.Load):
                name = self.registers.get(self.row.key(node, var))
                if name is not None:
                    return kernel_ir.Load(name, (self.slot,), node.dtype)
            return None

        return loop_ir.map_expressions(body, lambda e: ex.transform(e, replace))

    # --- phases -------------------------------------------------------------------

    def _phase(self, s: loop_ir.Stmt) -> list[kernel_ir.Stmt]:
        if isinstance(s, loop_ir.Init):
            return [self._declare(s)]
        if isinstance(s, loop_ir.Store):
            return self._row_store(s)
        body = self._from_registers(s.body, s.var)
        env = {**self.env, s.var: self._column()}
        statements = list(loop_to_kernel.translate_body(body, self.kernel_ir, env))
        out = self._over_row(statements)
        if s.kind == "reduce":
            for a in s.body:
                out += self._combine(a.acc)
        return out

    def _declare(self, s: loop_ir.Init) -> kernel_ir.Stmt:
        """An accumulator, starting from its identity (a constant: see ``recognise``)."""
        self.env[s.acc] = ex.Var(s.acc, s.value.dtype)
        return kernel_ir.Declare(s.acc, s.value.dtype, s.value)

    def _row_store(self, s: loop_ir.Store) -> list[kernel_ir.Stmt]:
        """A value per row, stored by the row's first thread."""
        (store,) = loop_to_kernel.translate_body((s,), self.kernel_ir, self.env)
        first = ex.op("eq", self.lane, 0)
        guard = first if self.row_ok is None else ex.op("and", self.row_ok, first)
        return [kernel_ir.If(guard, (store,))]

    # --- combining partial results ----------------------------------------------------

    def _combine(self, acc: str) -> list[kernel_ir.Stmt]:
        """Every thread of the row ends with the whole row's value of ``acc``."""
        op, dtype = self.row.accumulators[acc]
        var = ex.Var(acc, dtype)
        out = self._butterfly(op, var, min(self.threads, WARP))
        warps = self.threads // WARP
        if warps <= 1:
            return out
        name = fresh_name(f"partial_{acc}", self.taken)
        shape = (warps,) if self.rows_per_block == 1 else (self.rows_per_block, warps)
        self.arrays.append(kernel_ir.Array(name, dtype, shape, "shared"))
        lead = () if self.rows_per_block == 1 else (kernel_ir.thread_idx("y"),)
        warp = index.simplify(self.lane // WARP)
        out.append(kernel_ir.If(ex.op("eq", index.simplify(self.lane % WARP), 0),
                                (kernel_ir.Store(name, lead + (warp,), var),)))
        out.append(kernel_ir.Barrier())
        out.append(kernel_ir.Assign(acc, kernel_ir.Load(name, lead + (index.simplify(self.lane % warps),), dtype)))
        return out + self._butterfly(op, var, warps)

    def _butterfly(self, op: str, var: ex.Var, lanes: int) -> list[kernel_ir.Stmt]:
        """Combine ``var`` across each group of ``lanes`` adjacent lanes, leaving the result in all of them."""
        out = []
        mask = lanes // 2
        while mask:
            out.append(kernel_ir.Assign(var.name, loop_to_kernel.combine(op, var, kernel_ir.ShuffleXor(var, mask))))
            mask //= 2
        return out

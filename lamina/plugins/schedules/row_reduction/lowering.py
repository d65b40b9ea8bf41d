"""The row-reduction schedule's Tile IR as Kernel IR.

Block (threads, rows_per_block): ``threadIdx.y`` picks the row of the block,
``threadIdx.x`` the thread's first column; slot ``j`` of a thread is column
``threadIdx.x + j * threads``. With the row in registers::

    var row = blockIdx.x * rows_per_block + threadIdx.y
    unrolled for j in 0..elements_per_thread:           one pass over memory
      if row < rows and column < n: row_x[j] = x[...]     (and row_w[j] = w[...]: prefetch_epilogue_reads)
    var acc0 = identity
    unrolled for j ...: if ...: acc0 = max(acc0, row_x[j])
    acc0 = max(acc0, shuffle_xor(acc0, 16)) ... 1        the warp's partial, in every lane
    if threadIdx.x % 32 == 0: partial_acc0[threadIdx.y][threadIdx.x // 32] = acc0
    barrier                                              (a block per row only)
    acc0 = partial_acc0[threadIdx.y][threadIdx.x % warps]; shuffles over the warps
    ... the next reduction, then the epilogue's stores from registers

With vectors of W elements, slot ``j`` is vector ``threadIdx.x + j * threads``, and
each loop over the row runs the slot's W elements in an unrolled loop over ``e``
(column ``vector * W + e``): the row is loaded as ``vector load xW row_x[j][0] <- x[...]``,
a loop's other vector accesses go through a register array of W elements (a vector
load before the elements, a vector store after them), and the rest stay scalar.

Shuffles run in every lane (never under a guard), so rows past the end still take part
in them; their loads and stores are guarded. Each reduction has its own partial-result
array, so that one barrier per reduction is enough.
"""

from __future__ import annotations

import attrs

from lamina.core.ir import dtypes, expr as ex, index, kernel_ir, loop_ir, sizes, tile_ir
from lamina.core.ir.expr import Expr
from lamina.core.ir.names import fresh_name
from lamina.core.target import Target
from lamina.plugins.schedules import coordinate_conditions, loop_to_kernel, reciprocals
from lamina.plugins.schedules.row_reduction import masked_reads, vectors
from lamina.plugins.schedules.row_reduction.recognise import RowReduction, pieces
from lamina.plugins.schedules.row_reduction.tiling import RowDecisions, knobs_of

WARP = kernel_ir.WARP_SIZE
UNROLLED_SLOTS = 8
"""A thread's loops over a row it does not keep in registers are unrolled up to this many
slots, so that the loads of several slots are in flight together."""


def lower(tile: tile_ir.TileKernel, target: Target) -> kernel_ir.Kernel:
    found = pieces(tile.kernel)
    if len(found) == 1:
        return _RowLowering(found[0], knobs_of(tile)).kernel()
    return _one_after_another(tile.kernel, found, knobs_of(tile))


def _one_after_another(kernel: loop_ir.Kernel, found: tuple[RowReduction, ...],
                       decisions: RowDecisions) -> kernel_ir.Kernel:
    """Row reductions in one launch: each one's blocks after the previous one's, a block running
    the body of the one its index falls in (the same choice in all its threads, so that its
    barriers stay whole)."""
    taken = loop_to_kernel.names_in(kernel)
    arrays: list[kernel_ir.Array] = []
    ends: list[tuple[int, tuple[kernel_ir.Stmt, ...]]] = []
    first = 0
    for piece in found:
        lowered = _RowLowering(piece, decisions, first_block=first, taken=taken).kernel()
        taken |= {a.name for a in lowered.arrays}
        arrays += lowered.arrays
        first += lowered.launch.grid[0]
        ends.append((first, lowered.body))
    body = ends[-1][1]
    for end, then in reversed(ends[:-1]):
        body = (kernel_ir.If(ex.op("lt", kernel_ir.block_idx("x"), end), then, body),)
    return kernel_ir.Kernel(
        name=kernel.name,
        params=loop_to_kernel.params(kernel),
        arrays=tuple(arrays),
        body=body,
        launch=kernel_ir.Launch((first, 1, 1), (decisions.threads, decisions.rows_per_block, 1)),
        sizes=loop_to_kernel.size_params(kernel),
    )


class _RowLowering:
    def __init__(self, row: RowReduction, decisions: RowDecisions, first_block: int = 0,
                 taken: set[str] = frozenset()):
        """``first_block``: the launch's block that takes the row's first rows (after the blocks of
        the row reductions before it); ``taken``: names the kernel already uses besides the row's."""
        self.row = row
        self.first_block = first_block
        self.kernel_ir = row.kernel
        self.threads = decisions.threads
        self.rows_per_block = decisions.rows_per_block
        self.in_registers = decisions.row_in_registers
        self.prefetched_reads = row.reads_after_a_reduction if decisions.prefetch_epilogue_reads else ()
        self.decisions = decisions
        self.width = decisions.vector_width
        self.blocks = sizes.blocks(row.row_count, self.rows_per_block)
        self.taken = loop_to_kernel.names_in(row.kernel) | {row.column_name} | set(taken)
        self.arrays: list[kernel_ir.Array] = []
        self.registers: dict[tuple, str] = {}
        self.slot = ex.Var(fresh_name("j", self.taken))
        self.element = ex.Var(fresh_name("e", self.taken | {self.slot.name}))
        self.lane = kernel_ir.thread_idx("x")

    def kernel(self) -> kernel_ir.Kernel:
        row_var = ex.Var(fresh_name("row", self.taken))
        block = index.simplify(kernel_ir.block_idx("x") - self.first_block)
        start = block if self.rows_per_block == 1 else index.simplify(
            block * self.rows_per_block + kernel_ir.thread_idx("y"))
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
            sizes=loop_to_kernel.size_params(self.kernel_ir),
        )

    # --- columns ------------------------------------------------------------------

    def _vector(self) -> Expr:
        return index.simplify(self.lane + self.slot * self.threads)

    def _column(self) -> Expr:
        if self.width == 1:
            return self._vector()
        return index.simplify(self._vector() * self.width + self.element)

    def _register_index(self) -> tuple[Expr, ...]:
        return (self.slot,) if self.width == 1 else (self.slot, self.element)

    def _guard(self, length: int) -> Expr | None:
        conditions = [self.row_ok] if self.row_ok is not None else []
        if self.decisions.vectors_per_thread(length) * self.threads * self.width != length:
            conditions.append(ex.op("lt", self._vector(), length // self.width))
        if not conditions:
            return None
        return conditions[0] if len(conditions) == 1 else ex.op("and", *conditions)

    def _over_row(self, statements: list[kernel_ir.Stmt], length: int) -> list[kernel_ir.Stmt]:
        """``statements`` for each slot of the thread in a loop of ``length`` columns, guarded by
        the slot being in it."""
        guard = self._guard(length)
        slots = self.decisions.vectors_per_thread(length)
        body = tuple(statements) if guard is None else (kernel_ir.If(guard, tuple(statements)),)
        unroll = self.in_registers or not sizes.is_symbolic(slots) and slots <= UNROLLED_SLOTS
        return [kernel_ir.For(self.slot.name, ex.const(0), ex.const(slots), 1, body, unroll=unroll)]

    def _per_element(self, statements: list[kernel_ir.Stmt]) -> list[kernel_ir.Stmt]:
        """``statements`` for each element of the slot's vector."""
        if self.width == 1 or not statements:
            return statements
        return [kernel_ir.For(self.element.name, ex.const(0), ex.const(self.width), 1, tuple(statements),
                              unroll=True)]

    def _vector_offset(self, buffer: str, idx: tuple[Expr, ...], var: str) -> Expr:
        """The flat offset in ``buffer`` of the first element of the slot's vector."""
        offset = index.linearize(idx, self.kernel_ir.buffer(buffer).type.shape)
        env = {**self.env, var: index.simplify(self._vector() * self.width)}
        return index.simplify(loop_to_kernel.translate_expr(offset, self.kernel_ir, env))

    def _vector_register(self, buffer: str) -> str:
        """A register array for one vector of ``buffer``."""
        name = fresh_name(f"{buffer}_vector", self.taken | {a.name for a in self.arrays})
        self.arrays.append(kernel_ir.Array(name, self.kernel_ir.buffer(buffer).type.dtype, (self.width,), "register"))
        return name

    def _copies(self, kind, register: str, lead: tuple[Expr, ...], buffer: str, offset: Expr) -> list[kernel_ir.Stmt]:
        """A vector of ``buffer`` from ``offset`` on moved to (``VectorLoad``) or from
        (``VectorStore``) row ``lead`` of ``register``, in accesses of 16 bytes at most."""
        count, per_access = vectors.accesses(self.width, self.kernel_ir.buffer(buffer).type.dtype.itemsize)
        out = []
        for k in range(count):
            first = ex.const(k * per_access)
            at = (index.simplify(offset + k * per_access),)
            if kind is kernel_ir.VectorLoad:
                out.append(kernel_ir.VectorLoad(register, lead + (first,), buffer, at, per_access))
            else:
                out.append(kernel_ir.VectorStore(buffer, at, register, lead + (first,), per_access))
        return out

    def _load_row(self) -> list[kernel_ir.Stmt]:
        """Each row access read by several loops, and each read after a reduction that is
        loaded early, loaded once into a register array."""
        column = {self.row.column_name: self._column()}
        loads = []
        for key in self.row.shared_reads + self.prefetched_reads:
            buffer, idx, dtype = key
            name = fresh_name(f"row_{buffer}", self.taken | {a.name for a in self.arrays})
            self.registers[key] = name
            slots = self.decisions.vectors_per_thread(self.row.length)
            shape = (slots,) if self.width == 1 else (slots, self.width)
            self.arrays.append(kernel_ir.Array(name, dtype, shape, "register"))
            if vectors.is_vector_access(self.kernel_ir, buffer, idx, dtype, self.row.column_name, self.width):
                offset = self._vector_offset(buffer, idx, self.row.column_name)
                copies = self._copies(kernel_ir.VectorLoad, name, (self.slot,), buffer, offset)
                first = index.simplify(self._vector() * self.width)
                places = [(self.slot, ex.const(e)) for e in range(self.width)]
                loads += self._unless_masked(key, copies, name, places, dtype, first, self.width)
            else:
                node = loop_ir.Load(buffer, idx, dtype)
                value = loop_to_kernel.translate_expr(node, self.kernel_ir, {**self.env, **column})
                load = [kernel_ir.Store(name, self._register_index(), value)]
                masked = self._unless_masked(key, load, name, [self._register_index()], dtype, self._column(), 1)
                loads += self._per_element(masked)
        return self._over_row(loads, self.row.length) if loads else []

    def _unless_masked(self, key: tuple, loads: list[kernel_ir.Stmt], register: str, places: list[tuple[Expr, ...]],
                       dtype, first: Expr, columns: int) -> list[kernel_ir.Stmt]:
        """``loads`` of ``columns`` columns of row access ``key`` from column ``first``, skipped
        where a mask on coordinates leaves all of them unused (``masked_reads``); the register's
        ``places`` then hold zeros, which nothing reads."""
        unused = masked_reads.skippable_where(self.row, key)
        if unused is None:
            return loads
        box = {name: (value, value) for name, value in self.env.items()}
        box[self.row.column_name] = (first, index.simplify(first + (columns - 1)))
        skipped = coordinate_conditions.holds_over(unused, box)
        if skipped is None:
            return loads
        zeros = [kernel_ir.Store(register, place, ex.cast(ex.const(0), dtype)) for place in places]
        return [kernel_ir.If(ex.op("not", skipped), tuple(loads), tuple(zeros))]

    def _from_registers(self, body: tuple[loop_ir.Stmt, ...], var: str) -> tuple[loop_ir.Stmt, ...]:
        """``body`` of the loop over ``var`` with its row accesses read from registers."""

        def replace(node: Expr) -> Expr | None:
            if isinstance(node, loop_ir.Load):
                name = self.registers.get(self.row.key(node, var))
                if name is not None:
                    return kernel_ir.Load(name, self._register_index(), node.dtype)
            return None

        return loop_ir.map_expressions(body, lambda e: ex.transform(e, replace))

    # --- phases -------------------------------------------------------------------

    def _phase(self, s: loop_ir.Stmt) -> list[kernel_ir.Stmt]:
        if isinstance(s, loop_ir.Init):
            return [self._declare(s)]
        if isinstance(s, loop_ir.Store):
            return self._row_store(s)
        out: list[kernel_ir.Stmt] = []
        body = self._from_registers(s.body, s.var)
        if s.kind == "serial":
            out, body = self._reciprocals(body)
        env = {**self.env, s.var: self._column()}
        if self.width == 1:
            out += self._over_row(list(loop_to_kernel.translate_body(body, self.kernel_ir, env)), s.extent)
        else:
            out += self._over_row(self._vector_slot(attrs.evolve(s, body=body), env), s.extent)
        if s.kind == "reduce":
            for a in s.body:
                out += self._combine(a.acc)
        return out

    def _reciprocals(self, body: tuple[loop_ir.Stmt, ...]) -> tuple[list[kernel_ir.Stmt], tuple[loop_ir.Stmt, ...]]:
        """The reciprocal of each accumulator that ``body``'s stores divide by, declared once
        for the row, and ``body`` multiplying by it instead (``reciprocals``)."""
        stores = [s for s in body if isinstance(s, loop_ir.Store)]
        names = {acc: fresh_name(f"{acc}_reciprocal", self.taken)
                 for acc in reciprocals.divisors(stores, self.row.accumulators)}
        declarations = []
        for acc, name in names.items():
            dtype = self.row.accumulators[acc][1]
            declarations.append(kernel_ir.Declare(name, dtype, reciprocals.reciprocal(ex.Var(acc, dtype))))
            self.env[name] = ex.Var(name, dtype)
        rewritten = loop_ir.map_expressions(body, lambda e: reciprocals.multiplying_by_reciprocals(e, names))
        return declarations, rewritten

    def _vector_slot(self, loop: loop_ir.Loop, env: dict[str, Expr]) -> list[kernel_ir.Stmt]:
        """One slot of a loop over the row: its vector loads, its elements, its vector stores."""
        before: list[kernel_ir.Stmt] = []
        after: list[kernel_ir.Stmt] = []
        in_registers: dict[loop_ir.Load, Expr] = {}
        for load in vectors.vector_loads(self.row, loop, self.width):
            name = self._vector_register(load.buffer)
            offset = self._vector_offset(load.buffer, load.index, loop.var)
            before += self._copies(kernel_ir.VectorLoad, name, (), load.buffer, offset)
            in_registers[load] = kernel_ir.Load(name, (self.element,), load.dtype)
        body = loop_ir.map_expressions(loop.body, lambda e: ex.transform(e, in_registers.get))
        vector_stores = set(vectors.vector_stores(self.row, attrs.evolve(loop, body=body), self.width))
        elements: list[kernel_ir.Stmt] = []
        for s in body:
            if s in vector_stores:
                name = self._vector_register(s.buffer)
                value = loop_to_kernel.translate_expr(s.value, self.kernel_ir, env)
                elements.append(kernel_ir.Store(name, (self.element,), value))
                offset = self._vector_offset(s.buffer, s.index, loop.var)
                after += self._copies(kernel_ir.VectorStore, name, (), s.buffer, offset)
            else:
                elements += loop_to_kernel.translate_body((s,), self.kernel_ir, env)
        return before + self._per_element(elements) + after

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

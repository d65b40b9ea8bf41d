"""The contraction schedule's Tile IR written as Kernel IR.

Per block: each thread clears its register tile of accumulators; the k-tiles of every
staged operand are copied into shared memory (zero-filled outside the tensors), the
next ones in flight while the threads combine the current one, reading each run of
register-tile rows or columns that the Tile IR groups with one vector load (or, on tensor
cores, the fragments of each warp's mma, ``mma_sync.steps``); k-split thread groups
add up their register tiles through shared memory; then each thread (of the first
group) writes its register tile through the kernel's epilogue, guarded at the ragged edges,
a run of adjacent outputs in one store where the output's layout allows. Where the Tile
IR says so, each warp is a patch of the block's threads and blocks run down groups of grid
rows: the prologue renumbers threads and blocks, and the rest of the kernel uses those numbers.
"""

from __future__ import annotations


from lamina.core.ir import expr as ex, index, kernel_ir, loop_ir, sizes, tile_ir
from lamina.core.ir.expr import Expr
from lamina.plugins.schedules import coordinate_conditions, loop_to_kernel
from lamina.plugins.schedules.contraction import arrangement, tiling, unneeded_blocks, unread_outputs
from lamina.plugins.schedules.contraction.copies import SharedCopies, same_position
from lamina.plugins.schedules.contraction.layout import (
    BlockLayout,
    KernelNames,
    all_of,
    store_width,
    batch_coordinates,
    dynamic_shared_bytes,
    any_of,
    below,
    first_owned,
    owned,
)
from lamina.plugins.schedules.contraction.mma_sync import products as mma_sync
from lamina.plugins.schedules.contraction.mma_sync.steps import TensorCoreSteps
from lamina.plugins.schedules.contraction.recognise import Contraction
from lamina.plugins.schedules.contraction.settings import MMA_PRODUCTS, settings_of



class ContractionWriter:
    """Writes the Kernel IR of a contraction's Tile IR; ``taken`` are further names its own
    must avoid (a subclass that writes more of the kernel passes its names)."""

    K_AXIS = 0
    """The axis of a staged operand tile that runs along k: the first, the tile k-major."""
    staged_position = staticmethod(same_position)
    """The block's row or column that each staged row holds (``SharedCopies``)."""

    def __init__(self, tile: tile_ir.TileKernel, c: Contraction, taken: frozenset[str] = frozenset()):
        self.tile, self.c, self.kernel = tile, c, c.kernel
        self.settings = settings_of(tile)
        bindings = {b.block_dim: b for b in tile.grid}
        self.cols, self.rows = bindings["x"], bindings["y"]
        self.block_k = tile.reduction.step
        self.splits = tile.reduction.splits if tile.reduction.strategy == "block_tree" else 1
        self.k_slice = self.block_k // self.splits
        self.threads = self.cols.threads * self.rows.threads * self.splits
        self.k_tiles = sizes.blocks(c.reduce_extent, self.block_k)  # counted at run time where the reduction is
        loop_vars = {s.var for s in loop_ir.statements(self.kernel.body) if isinstance(s, loop_ir.Loop)}
        self.names = names = KernelNames({b.name for b in self.kernel.inputs + self.kernel.outputs} | loop_vars
                                         | {c.acc} | taken)
        self.tid, self.row, self.col, self.batch, self.split = (
            ex.Var(names.fresh(n)) for n in ("tid", "row", "col", "batch", "split")
        )
        self.kt, self.kk, self.round = (ex.Var(names.fresh(n)) for n in ("kt", "kk", "round"))
        self.acc = names.fresh("acc")
        self.partial = names.fresh("partial")
        self.tiles = {s.index: names.fresh(f"{s.buffer}_tile") for s in tile.stages}
        self.regs = {s.index: names.fresh(f"{s.buffer}_reg") for s in tile.stages}
        self.invariants = {load: names.fresh(f"{load.buffer}_value") for load in c.invariant_loads()}
        self.mma = (TensorCoreSteps(self.names, mma_sync.factors(c), c.acc_dtype)
                    if self.settings.products == MMA_PRODUCTS else None)
        self.store_width = store_width(c, self.cols.group)
        self.outputs = [names.fresh(f"{s.buffer}_out") for s in c.epilogue] if self.store_width > 1 else []
        self.ranges = {
            self.tid.name: self.threads, self.kt.name: self.k_tiles, self.kk.name: self.k_slice,
            self.split.name: self.splits,
        }
        self.batch_env = batch_coordinates(c, self.batch)
        self.grid = tile.grid_shape()
        self.thread_col, self.thread_row = self._coordinates(
            "thread", (self.cols.threads, self.rows.threads), self.settings.warp_patch is not None)
        self.block_col, self.block_row = self._coordinates(
            "block", (self.grid["x"], self.grid["y"]), self.settings.grouped_rows > 1)
        self.unread = self.unread_block()
        self.unneeded = self.unneeded_block()
        self.k_tiles_here = self._k_tiles_of_block()
        self.layout = BlockLayout(
            c, self.rows, self.cols, self.grid, self.threads, self.block_k, self.k_slice, self.tid, self.kk,
            self.batch, self.thread_row, self.thread_col, self.block_row, self.block_col, self.batch_env, self.acc,
            self.tiles, self.names)
        self.copies = SharedCopies(self.layout, tile.stages, self.round, self.ranges, self.K_AXIS,
                                   self.staged_position, self.copy_masks())

    def copy_masks(self) -> dict[str, Expr]:
        """Conditions outside which a staged operand holds zeros (``SharedCopies``): none, the
        products applying their own."""
        return {}

    # --- coordinates ---------------------------------------------------------

    def _coordinates(self, kind: str, shape: tuple[int, int], rearranged: bool) -> tuple[Expr, Expr]:
        """The thread's or block's (``kind``) column and row among ``shape`` (columns, rows):
        CUDA's indices, or variables that the prologue computes where the Tile IR rearranges
        the warps or the order of blocks."""
        special = kernel_ir.thread_idx if kind == "thread" else kernel_ir.block_idx
        if not rearranged:
            return special("x"), special("y")
        column, row = ex.Var(self.names.fresh(f"{kind}_col")), ex.Var(self.names.fresh(f"{kind}_row"))
        self.ranges.update({column.name: shape[0], row.name: shape[1]})
        return column, row

    def _warp_patches(self) -> list[kernel_ir.Stmt]:
        """Each warp a patch of ``rows`` x ``columns`` threads, the patches in row-major order."""
        rows, columns = self.settings.warp_patch
        flat = kernel_ir.thread_idx("y") * self.cols.threads + kernel_ir.thread_idx("x")
        lane, warp = flat % kernel_ir.WARP_SIZE, flat // kernel_ir.WARP_SIZE
        across = self.cols.threads // columns
        return [
            kernel_ir.Declare(self.thread_col.name, self.thread_col.dtype, lane % columns + warp % across * columns),
            kernel_ir.Declare(self.thread_row.name, self.thread_row.dtype, lane // columns + warp // across * rows),
        ]

    def _grouped_blocks(self) -> list[kernel_ir.Stmt]:
        """Blocks in CUDA's order renumbered to run down groups of ``grouped_rows`` grid rows."""
        return arrangement.grouped_blocks(self.block_row, self.block_col, self.grid["x"], self.grid["y"],
                                          self.settings.grouped_rows)

    def unread_block(self) -> Expr | None:
        """True in a block none of whose outputs any kernel reads (``unread_outputs``), else None."""
        return self.at_every_output(unread_outputs.unread_where(self.c))

    def unneeded_block(self) -> Expr | None:
        """True in a block that need not run the product: none of its outputs uses the sum
        (``unneeded_blocks``) or is read at all; else None."""
        return any_of([self.at_every_output(unneeded_blocks.unneeded_where(self.c)), self.unread])

    def at_every_output(self, condition: Expr | None) -> Expr | None:
        """True in a block where ``condition`` on the output coordinates holds at every output;
        None where there is no condition or the block's bounds cannot decide it."""
        if condition is None:
            return None
        box = {name: (e, e) for name, e in self.batch_env.items()}
        for var, binding, block in ((self.c.m, self.rows, self.block_row), (self.c.n, self.cols, self.block_col)):
            first = block * binding.block_tile
            box[var] = (first, first + (binding.block_tile - 1))
        return coordinate_conditions.holds_over(condition, box)

    @property
    def _k_tiles_vary(self) -> bool:
        """Whether some blocks run fewer k-tiles than others."""
        return self.c.slice_bound is not None or self.unneeded is not None

    def _k_tiles_of_block(self) -> Expr:
        """The k-tiles this block runs: all of them; where its split-K slice ends sooner
        (``c.slice_bound``, whose slices are whole k-tiles) those up to its end; none where
        its outputs do not use the sum."""
        if self.c.slice_bound is not None:
            return ex.Var(self.names.fresh("slice_k_tiles"))
        if self.unneeded is not None:
            return ex.Var(self.names.fresh("needed_k_tiles"))
        return ex.const(self.k_tiles)

    def _k_tiles_prologue(self) -> list[kernel_ir.Stmt]:
        if not self._k_tiles_vary:
            return []
        k_tiles: Expr = ex.const(self.k_tiles)
        bound = self.c.slice_bound
        if bound is not None:
            left = (bound.end - ex.substitute(bound.start, self.batch_env)) // self.block_k
            k_tiles = ex.op("min", left, self.k_tiles)
        if self.unneeded is not None:
            k_tiles = ex.op("where", self.unneeded, ex.const(0), k_tiles)
        return [kernel_ir.Declare(self.k_tiles_here.name, self.k_tiles_here.dtype, k_tiles)]

    def _row(self, a: int) -> Expr:
        return owned(self.row, self.rows, a)

    def _col(self, b: int) -> Expr:
        return owned(self.col, self.cols, b)

    def thread_env(self, a: int, b: int) -> dict[str, Expr]:
        return {**self.batch_env, self.c.m: self._row(a), self.c.n: self._col(b)}

    def output_guard(self, a: int, b: int) -> Expr | None:
        parts = []
        for binding, coord in ((self.rows, self._row(a)), (self.cols, self._col(b))):
            if binding.extent % binding.block_tile:
                parts.append(below(coord, binding.extent, self.ranges))
        return all_of(parts)

    def _k_guard(self, k: Expr, ranges: index.Ranges) -> Expr | None:
        return self.layout.k_guard(k, ranges)

    # --- arithmetic ------------------------------------------------------------

    def _placeholders(self) -> Expr:
        """The accumulated value with every staged or hoisted load replaced by its register."""
        staged = {self.c.operand(s.index).load: self.regs[s.index] for s in self.tile.stages}
        registers = {**staged, **self.invariants}

        def replace(node: Expr) -> Expr | None:
            if isinstance(node, loop_ir.Load) and node in registers:
                return ex.Var(registers[node], node.dtype)
            return None

        return ex.transform(self.c.value, replace)

    def _fill_registers(self, slot: Expr) -> list[kernel_ir.Stmt]:
        out = []
        for stage in self.tile.stages:
            side = self.c.operand(stage.index).side
            tile, reg = self.tiles[stage.index], self.regs[stage.index]
            if side == "k":
                value = kernel_ir.Load(tile, (slot, self._k_in_tile()), stage.dtype)
                out.append(kernel_ir.Store(reg, (ex.const(0),), value))
                continue
            binding = self.rows if side == "m" else self.cols
            first = first_owned(self.thread_row if side == "m" else self.thread_col, binding)
            for i in range(0, binding.per_thread, binding.group):
                at = (slot, self._k_in_tile(), owned(first, binding, i))
                if binding.group > 1:
                    out.append(kernel_ir.VectorLoad(reg, (ex.const(i),), tile, at, binding.group))
                else:
                    out.append(kernel_ir.Store(reg, (ex.const(i),), kernel_ir.Load(tile, at, stage.dtype)))
        return out

    def _register_env(self, a: int, b: int) -> dict[str, Expr]:
        env = {}
        for stage in self.tile.stages:
            side = self.c.operand(stage.index).side
            position = {"m": a, "n": b, "k": 0}[side]
            env[self.regs[stage.index]] = kernel_ir.Load(self.regs[stage.index], (ex.const(position),), stage.dtype)
        for load, name in self.invariants.items():
            env[name] = kernel_ir.Load(name, (ex.const(a), ex.const(b)), load.dtype)
        return env

    def accumulator(self, a: int, b: int) -> kernel_ir.Load:
        return kernel_ir.Load(self.acc, (ex.const(a), ex.const(b)), self.c.acc_dtype)

    def _k_in_tile(self) -> Expr:
        """The row of the k-tile that this thread's split reads in step ``kk``."""
        return self.split * self.k_slice + self.kk if self.splits > 1 else self.kk

    def _compute(self, slot: Expr, issued: tuple[kernel_ir.Stmt, ...] = ()) -> kernel_ir.For:
        """The steps of k-tile ``kt`` from ``slot``, each step starting with ``issued`` (the
        next k-tile's copies that it issues, ``SharedCopies.spread``)."""
        if self.mma is not None:
            return self.mma.k_tile(self.layout, slot)
        value = self._placeholders()
        k = self.kt * self.block_k + self._k_in_tile()
        body = self._fill_registers(slot)
        for a, b in self.register_tile():
            env = {**self.thread_env(a, b), **self._register_env(a, b), self.c.reduce_var: k}
            term = loop_to_kernel.translate_expr(value, self.kernel, env)
            total = loop_to_kernel.combine("sum", self.accumulator(a, b), term)
            body.append(kernel_ir.Store(self.acc, (ex.const(a), ex.const(b)), total))
        guard = self._k_guard(k, self.ranges)
        if guard is not None:
            body = [kernel_ir.If(guard, body)]
        return kernel_ir.For(self.kk.name, ex.const(0), ex.const(self.k_slice), 1, [*issued, *body], unroll=True)

    def register_tile(self):
        return [(a, b) for a in range(self.rows.per_thread) for b in range(self.cols.per_thread)]

    # --- the kernel --------------------------------------------------------------

    def prologue(self) -> list[kernel_ir.Stmt]:
        tx, ty = kernel_ir.thread_idx("x"), kernel_ir.thread_idx("y")
        out: list[kernel_ir.Stmt] = []
        if self.settings.warp_patch is not None:
            out += self._warp_patches()
        if self.settings.batch_rows > 1:
            out += arrangement.blocks_across_batch(self.batch, self.block_row, self.block_col,
                                                   ex.Var(self.names.fresh("row_of_batch")), self.grid,
                                                   self.settings.grouped_rows)
        elif self.settings.grouped_rows > 1:
            out += self._grouped_blocks()
        flat_row = ty
        if self.splits > 1:
            out.append(kernel_ir.Declare(self.split.name, self.split.dtype, kernel_ir.thread_idx("z")))
            flat_row = self.split * self.rows.threads + ty
        first_row, first_col = first_owned(self.thread_row, self.rows), first_owned(self.thread_col, self.cols)
        out += [
            kernel_ir.Declare(self.tid.name, self.tid.dtype, flat_row * self.cols.threads + tx),
            kernel_ir.Declare(self.row.name, self.row.dtype, self.block_row * self.rows.block_tile + first_row),
            kernel_ir.Declare(self.col.name, self.col.dtype, self.block_col * self.cols.block_tile + first_col),
        ]
        if self.c.batch and self.settings.batch_rows == 1:
            out.append(kernel_ir.Declare(self.batch.name, self.batch.dtype, kernel_ir.block_idx("z")))
        out += self._k_tiles_prologue()
        init = ex.cast(self.c.init, self.c.acc_dtype)
        out += [kernel_ir.Store(self.acc, (ex.const(a), ex.const(b)), init) for a, b in self.register_tile()]
        for load, name in self.invariants.items():
            for a, b in self.register_tile():
                read = loop_to_kernel.translate_expr(load, self.kernel, self.thread_env(a, b))
                store = kernel_ir.Store(name, (ex.const(a), ex.const(b)), read)
                guard = self.output_guard(a, b)
                if guard is None:
                    out.append(store)
                else:
                    zero = kernel_ir.Store(name, (ex.const(a), ex.const(b)), ex.cast(ex.const(0), load.dtype))
                    out.append(kernel_ir.If(guard, (store,), (zero,)))
        return out

    def main_loop(self) -> list[kernel_ir.Stmt]:
        """With several buffers, one barrier per k-tile: after it, k-tile ``kt`` has landed for
        every thread and every thread has finished reading the slot of ``kt - 1``, so the copy
        of k-tile ``kt + buffers - 1`` into that slot starts there: all of it before the
        arithmetic, or a few rounds at each of the first ``copy_steps`` steps of k."""
        kt, k_tiles = self.kt, self.k_tiles_here
        if self.copies.buffers == 1:
            zero = ex.const(0)
            body = self.copies.issue(kt, zero) + self.copies.wait(0) + [kernel_ir.Barrier(), self._compute(zero), kernel_ir.Barrier()]
            return [self._k_tile_loop(body)]
        waits = self.copies.wait(0)
        if self.copies.asynchronous:
            for j in range(1, self.copies.buffers - 1):
                waits = [kernel_ir.If(ex.op("lt", kt + j, k_tiles), self.copies.wait(j), waits)]
        ahead = kt + (self.copies.buffers - 1)
        slot, fill, start, advance = self._slots(ahead)
        if self.settings.copy_steps:
            issued = (kernel_ir.If(ex.op("lt", ahead, k_tiles), self.copies.spread(ahead, fill, self.settings.copy_steps)),)
            body = [*waits, kernel_ir.Barrier(), self._compute(slot, issued), *advance]
        else:
            refill = kernel_ir.If(ex.op("lt", ahead, k_tiles), self.copies.issue(ahead, fill))
            body = [*self.k_tile(waits, refill, slot), *advance]
        first = []
        counted = sizes.is_symbolic(self.k_tiles)
        for j in range(self.copies.buffers - 1 if counted else min(self.copies.buffers - 1, self.k_tiles)):
            issue = self.copies.issue(ex.const(j), ex.const(j))
            first += [kernel_ir.If(ex.op("lt", ex.const(j), k_tiles), issue)] if self._k_tiles_vary or counted else issue
        return first + start + [self._k_tile_loop(body)]

    def k_tile(self, waits: list[kernel_ir.Stmt], refill: kernel_ir.Stmt, slot: Expr) -> list[kernel_ir.Stmt]:
        """K-tile ``kt`` from ``slot``, once ``waits`` and a barrier have it landed for every
        thread, the copy of a k-tile ahead (``refill``) started first."""
        return [*waits, kernel_ir.Barrier(), refill, self._compute(slot)]

    def _k_tile_loop(self, body: list[kernel_ir.Stmt]) -> kernel_ir.For:
        """The loop over k-tiles: every block runs the most of them, and blocks of a shorter
        split-K slice, or whose outputs do not use the sum, skip the rest (loop bounds are the
        same in every block)."""
        if self._k_tiles_vary:
            body = [kernel_ir.If(ex.op("lt", self.kt, self.k_tiles_here), body)]
        return kernel_ir.For(self.kt.name, ex.const(0), ex.const(self.k_tiles), 1, body)

    def _slots(self, ahead: Expr) -> tuple[Expr, Expr, list[kernel_ir.Stmt], list[kernel_ir.Stmt]]:
        """The buffer that k-tile ``kt`` is read from and the one that k-tile ``ahead`` is copied
        into, with the statements that start them before the loop and advance them in it.

        With a power of two of buffers they are ``kt`` and ``ahead`` modulo the buffers, a
        mask; otherwise counters that wrap round, since the modulo would be a multiply and
        shifts every k-tile. On the H200 the counters and the copies' folded address offsets
        (``lamina.backends.cuda.codegen``) together made M = 2048 linears 3 to 4 % faster;
        the counters alone made two of them 9 % slower, so measure both before changing
        either (``experiments/contraction_tiling/``).
        """
        buffers = self.copies.buffers
        if buffers & (buffers - 1) == 0:
            return self.kt % buffers, ahead % buffers, [], []
        slot, fill = (ex.Var(self.names.fresh(n)) for n in ("slot", "fill_slot"))
        start = [kernel_ir.Declare(slot.name, slot.dtype, ex.const(0)),
                 kernel_ir.Declare(fill.name, fill.dtype, ex.const(buffers - 1))]
        advance = [kernel_ir.Assign(v.name, ex.op("where", ex.op("eq", v, buffers - 1), ex.const(0), v + 1))
                   for v in (slot, fill)]
        return slot, fill, start, advance

    def _combine_splits(self) -> list[kernel_ir.Stmt]:
        """Halve the k-splits until one holds the sum: the upper half hands its register tiles
        to the lower half through shared memory."""
        out: list[kernel_ir.Stmt] = []
        half = self.splits // 2
        while half:
            giving = ex.op("and", ex.op("ge", self.split, half), ex.op("lt", self.split, 2 * half))
            partner = self.tid + half * self.threads // self.splits
            hand = [kernel_ir.Store(self.partial, self._partial_index(self.tid, a, b), self.accumulator(a, b))
                    for a, b in self.register_tile()]
            take = [
                kernel_ir.Store(self.acc, (ex.const(a), ex.const(b)), loop_to_kernel.combine(
                    "sum", self.accumulator(a, b),
                    kernel_ir.Load(self.partial, self._partial_index(partner, a, b), self.c.acc_dtype)))
                for a, b in self.register_tile()
            ]
            out += [kernel_ir.If(giving, hand), kernel_ir.Barrier(), kernel_ir.If(ex.op("lt", self.split, half), take)]
            half //= 2
            if half:
                out.append(kernel_ir.Barrier())
        return out

    def _partial_index(self, thread: Expr, a: int, b: int) -> tuple[Expr, ...]:
        return (ex.const(a * self.cols.per_thread + b), thread)

    def epilogue(self) -> list[kernel_ir.Stmt]:
        out: list[kernel_ir.Stmt] = []
        for a in range(self.rows.per_thread):
            for b in range(0, self.cols.per_thread, self.store_width):
                guard = self.output_guard(a, b)
                if self.splits > 1:
                    guard = all_of([ex.op("eq", self.split, 0), guard])
                if self.store_width > 1:
                    out += self._vector_stores(a, b, guard)
                    continue
                env = {**self.thread_env(a, b), self.c.acc: self.accumulator(a, b)}
                out += loop_to_kernel.translate_body(self.c.epilogue, self.kernel, env, guard=guard)
        if self.unread is not None:
            return [kernel_ir.If(ex.op("not", self.unread), out)]
        return out

    def _vector_stores(self, a: int, b: int, guard: Expr | None) -> list[kernel_ir.Stmt]:
        """Each epilogue store of outputs ``(a, b)`` to ``(a, b + store_width - 1)``: the values
        computed into registers, then written in one access."""
        body: list[kernel_ir.Stmt] = []
        for store, register in zip(self.c.epilogue, self.outputs):
            for j in range(self.store_width):
                env = {**self.thread_env(a, b + j), self.c.acc: self.accumulator(a, b + j)}
                body.append(kernel_ir.Store(register, (ex.const(j),),
                                            loop_to_kernel.translate_expr(store.value, self.kernel, env)))
            env = self.thread_env(a, b)
            coords = tuple(loop_to_kernel.translate_expr(i, self.kernel, env) for i in store.index)
            offset = index.linearize(coords, self.kernel.buffer(store.buffer).type.shape)
            body.append(kernel_ir.VectorStore(store.buffer, (offset,), register, (ex.const(0),), self.store_width))
        return [kernel_ir.If(guard, body)] if guard is not None else body

    def arrays(self) -> list[kernel_ir.Array]:
        arrays = self.shared_arrays()
        arrays.append(kernel_ir.Array(self.acc, self.c.acc_dtype, (self.rows.per_thread, self.cols.per_thread), "register"))
        arrays += self.fragment_arrays()
        for load, name in self.invariants.items():
            arrays.append(
                kernel_ir.Array(name, load.dtype, (self.rows.per_thread, self.cols.per_thread), "register")
            )
        for store, name in zip(self.c.epilogue, self.outputs):
            dtype = self.kernel.buffer(store.buffer).type.dtype
            arrays.append(kernel_ir.Array(name, dtype, (self.store_width,), "register"))
        return arrays

    def shared_arrays(self) -> list[kernel_ir.Array]:
        """The staged k-tiles, and the k-splits' partial sums."""
        arrays = [
            kernel_ir.Array(self.tiles[s.index], s.dtype, s.padded_shape, "shared") for s in self.tile.stages
        ]
        if self.splits > 1:
            shape = tiling.partial_sums_shape(self.rows.per_thread, self.cols.per_thread, self.threads)
            arrays.append(kernel_ir.Array(self.partial, self.c.acc_dtype, shape, "shared"))
        return arrays

    def fragment_arrays(self) -> list[kernel_ir.Array]:
        """The registers that a step of k reads the operands into: a thread's rows and columns
        of each staged operand, or on tensor cores the mma's (``TensorCoreSteps.arrays``)."""
        if self.mma is not None:
            return self.mma.arrays(self.layout)
        arrays = []
        for stage in self.tile.stages:
            side = self.c.operand(stage.index).side
            length = {"m": self.rows.per_thread, "n": self.cols.per_thread, "k": 1}[side]
            arrays.append(kernel_ir.Array(self.regs[stage.index], stage.dtype, (length,), "register"))
        return arrays

    def kernel_ir(self, static_shared_bytes: int) -> kernel_ir.Kernel:
        """The kernel; past ``static_shared_bytes`` its shared arrays come from dynamic shared memory."""
        shape = self.grid
        arrays = self.arrays()
        return kernel_ir.Kernel(
            name=self.kernel.name,
            params=loop_to_kernel.params(self.kernel),
            arrays=arrays,
            body=self.prologue() + self.main_loop() + self._combine_splits() + self.epilogue(),
            launch=kernel_ir.Launch(
                (shape["x"], shape["y"], shape["z"]),
                (self.cols.threads, self.rows.threads, self.splits),
                dynamic_shared_bytes(arrays, static_shared_bytes),
            ),
            sizes=loop_to_kernel.size_params(self.kernel),
        )

"""Outputs of a ``products = wgmma_tma`` block written through shared memory, a row at a time.

A consumer thread holds two adjacent columns of each output row it touches (``epilogue``), which
it writes in one access where the row length lets every pair start aligned. Where it does not
(GPT-2's LM head: 50 257 words to a row of bf16 logits) each output is a store of its own, and
a warp's store touches eight rows a few bytes apart: about 2x the time of the same product at an
even row length (``experiments/odd_row_stores/``). Instead, the consumers put the epilogue's
values into a shared tile (rows padded by 16 bytes, so that a warp's eight rows fall in distinct
banks); after a barrier of the whole block, every thread, the producer warpgroup's too, copies
the tile out row by row, consecutive threads writing consecutive columns.

Only the grid's blocks do so (a persistent block's producer runs ahead into its next tile, and
the barrier needs it), for one output contiguous along the columns (``setting.staged_copy``);
the tile costs shared memory, which the setting counts (``setting.shared_bytes``).
"""

from __future__ import annotations

import math

from lamina.core.ir import expr as ex, index, kernel_ir
from lamina.core.ir.expr import Expr
from lamina.plugins.schedules import loop_to_kernel
from lamina.plugins.schedules.contraction.recognise import Contraction

ROW_PAD_BYTES = 16
"""Added to each row of the shared tile: a warp's eight rows then start four banks apart."""


def odd_rows(c: Contraction) -> bool:
    """Whether the contraction has one output, contiguous along the columns, whose rows start on
    odd elements, so that a thread's two adjacent outputs cannot be stored as one aligned pair on
    every row: a grid block then writes its outputs through shared memory
    (``setting.staged_copy``, which keeps the answer per kernel)."""
    if len(c.epilogue) != 1 or c.slice_bound is not None:
        return False
    store = c.epilogue[0]
    buffer = c.kernel.buffer(store.buffer).type
    form = index.affine(index.linearize(store.index, buffer.shape))
    if not all(isinstance(atom, ex.Var) and atom.name in (c.m, c.n, *c.batch) for atom in form.terms):
        return False
    steps = {atom.name: coef for atom, coef in form.terms.items()}
    if steps.pop(c.n, None) != 1:
        return False
    return any(step % 2 for step in (*steps.values(), form.constant))


def row_length(block_n: int, itemsize: int) -> int:
    """Elements of a row of the shared tile."""
    return block_n + ROW_PAD_BYTES // itemsize


def tile_bytes(c: Contraction, block_m: int, block_n: int) -> int:
    itemsize = c.kernel.buffer(c.epilogue[0].buffer).type.dtype.itemsize
    return block_m * row_length(block_n, itemsize) * itemsize


class StagedOutputs:
    """The shared tile of a block's outputs and the block's copy of it to global memory."""

    stores_pairs = False
    """Each value is put on its own: the row length that brings the tile here leaves pairs unaligned."""

    def __init__(self, c: Contraction, name: str, block_m: int, block_n: int, threads: int,
                 block_row: Expr, block_col: Expr, batch_env: dict[str, Expr], fresh):
        self.c, self.name = c, name
        self.block_m, self.block_n, self.threads = block_m, block_n, threads
        self.block_row, self.block_col, self.batch_env = block_row, block_col, batch_env
        self.store = c.epilogue[0]
        self.dtype = c.kernel.buffer(self.store.buffer).type.dtype
        self.row_length = row_length(block_n, self.dtype.itemsize)
        self.step, self.element = ex.Var(fresh("step")), ex.Var(fresh("element"))

    def array(self) -> kernel_ir.Array:
        return kernel_ir.Array(self.name, self.dtype, (self.block_m, self.row_length), "shared")

    def tensor_maps(self) -> list[kernel_ir.TensorMap]:
        return []

    def put(self, row_in_block: Expr, col_in_block: Expr, value: Expr) -> kernel_ir.Stmt:
        """A consumer's epilogue value into the tile."""
        return kernel_ir.Store(self.name, (row_in_block, col_in_block), ex.cast(value, self.dtype))

    def after_puts(self) -> list[kernel_ir.Stmt]:
        """What each consumer thread does once its values are in: nothing, the block's barrier follows."""
        return []

    def copy_out(self) -> list[kernel_ir.Stmt]:
        """After the barrier: element ``step * threads + tid`` of the tile (row-major) to its output,
        where it lies inside the output."""
        c, size = self.c, self.block_m * self.block_n
        tid = kernel_ir.thread_idx("x")
        element = self.step * self.threads + tid
        row_in_block, col_in_block = self.element // self.block_n, self.element % self.block_n
        row = self.block_row * self.block_m + row_in_block
        col = self.block_col * self.block_n + col_in_block
        env = {**self.batch_env, c.m: row, c.n: col}
        buffer = c.kernel.buffer(self.store.buffer).type
        coordinates = tuple(loop_to_kernel.translate_expr(i, c.kernel, env) for i in self.store.index)
        target = (index.linearize(coordinates, buffer.shape),)
        inside = [ex.op("lt", self.element, size)]
        if c.extents[c.m] % self.block_m:
            inside.append(ex.op("lt", row, c.extents[c.m]))
        if c.extents[c.n] % self.block_n:
            inside.append(ex.op("lt", col, c.extents[c.n]))
        condition = inside[0]
        for term in inside[1:]:
            condition = ex.op("and", condition, term)
        value = kernel_ir.Load(self.name, (row_in_block, col_in_block), self.dtype)
        body = [kernel_ir.Declare(self.element.name, self.element.dtype, element),
                kernel_ir.If(condition, [kernel_ir.Store(self.store.buffer, target, value)])]
        return [kernel_ir.For(self.step.name, ex.const(0), ex.const(math.ceil(size / self.threads)), 1, body)]

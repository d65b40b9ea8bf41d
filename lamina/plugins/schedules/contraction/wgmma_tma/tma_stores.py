"""Outputs of a ``products = wgmma_tma`` block stored by the TMA from a shared tile.

A consumer thread holds two adjacent columns of each output row it touches. Stored from
registers, a warp's store writes a few bytes on each of eight rows, and a block's epilogue takes
one such store per pair of its outputs: at 512 rows, where a block does one tile, the epilogue is
about a sixth of the kernel (``experiments/gemm_mainloop/``). Instead, the consumers put their
values into a shared tile laid out as the TMA's box, fence them for the asynchronous proxy, the
block meets, and one thread asks the TMA to copy the tile out (``TmaStore``); the copy writes
only the elements inside the output, so a ragged edge needs no guard.

The tile is laid out so that a warp's eight rows fall in different banks: where the block's
columns are whole panels of 128 bytes, as panels in the 128-byte swizzle (one box each, as B
that lies along n is read); otherwise as plain rows where their length puts the eight rows at
most two to a bank (80, 112, 144, 176, 208 or 240 columns of bf16). Other blocks store from
registers.
"""

from __future__ import annotations

import collections

from lamina.core.ir import expr as ex, index, kernel_ir
from lamina.core.ir.expr import Expr
from lamina.plugins.schedules.contraction.recognise import Contraction

SWIZZLED = "swizzled panels"
PLAIN = "plain rows"
MOST_ROWS_A_BANK = 2
"""The bank conflicts a plain tile may cost a warp's writes: two of its eight rows to a bank."""


def output_rows(c: Contraction) -> tuple[int, int] | None:
    """The row stride and element size of the contraction's output where the TMA can store it, else
    None: one output, written at ``m * stride + n`` from its start (no batch but one of a single
    element, as a model's batch of one is; no split-K slice), its rows starting on 16-byte
    boundaries."""
    if len(c.epilogue) != 1 or any(c.extents[v] != 1 for v in c.batch) or c.slice_bound is not None:
        return None
    store = c.epilogue[0]
    buffer = c.kernel.buffer(store.buffer).type
    form = index.affine(index.linearize(store.index, buffer.shape))
    if form.constant or not all(isinstance(atom, ex.Var) for atom in form.terms):
        return None
    steps = {atom.name: coef for atom, coef in form.terms.items() if atom.name not in c.batch}
    if set(steps) != {c.m, c.n} or steps[c.n] != 1:
        return None
    stride, itemsize = steps[c.m], buffer.dtype.itemsize
    if stride < c.extents[c.n] or (stride * itemsize) % kernel_ir.GLOBAL_ALIGNMENT:
        return None
    return stride, itemsize


def panel_columns(itemsize: int) -> int:
    """Columns of a swizzled panel: one 128-byte row."""
    return kernel_ir.SWIZZLE_BYTES // itemsize


def layout(itemsize: int, block_n: int) -> str | None:
    """How a block of ``block_n`` columns lays out its tile for the TMA (``SWIZZLED`` or ``PLAIN``),
    or None where neither keeps a warp's writes within ``MOST_ROWS_A_BANK``."""
    if block_n % panel_columns(itemsize) == 0:
        return SWIZZLED
    if _rows_a_bank(block_n * itemsize, itemsize) <= MOST_ROWS_A_BANK:
        return PLAIN
    return None


def _rows_a_bank(row_bytes: int, itemsize: int) -> int:
    """The most of a warp's rows that write one bank in a plain tile of rows ``row_bytes`` long: lane
    ``4 g + t`` writes its two columns, ``2 itemsize`` bytes, at row ``g``, column ``2 t``."""
    words = max(1, 2 * itemsize // 4)
    banks = collections.Counter((g * row_bytes // 4 + 2 * t * itemsize // 4 + w) % 32
                                for g in range(8) for t in range(4) for w in range(words))
    return -(-max(banks.values()) // words)


def tile_bytes(block_m: int, block_n: int, itemsize: int) -> int:
    return block_m * block_n * itemsize


class TmaStoredOutputs:
    """The shared tile of a block's outputs and the TMA copies that store it."""

    stores_pairs = True
    """A consumer thread's two adjacent values are converted together and put in one access: put one by
    one, each conversion to 16 bits reads an accumulator on its own, and ptxas then serialises the
    kernel's wgmma (its warning C7514)."""

    def __init__(self, c: Contraction, name: str, map_name: str, block_m: int, block_n: int,
                 block_row: Expr, block_col: Expr):
        self.c, self.name, self.map_name = c, name, map_name
        self.block_m, self.block_n = block_m, block_n
        self.block_row, self.block_col = block_row, block_col
        self.store = c.epilogue[0]
        self.dtype = c.kernel.buffer(self.store.buffer).type.dtype
        self.stride, _ = output_rows(c)
        self.layout = layout(self.dtype.itemsize, block_n)
        self.panel = panel_columns(self.dtype.itemsize) if self.layout == SWIZZLED else block_n

    @property
    def copies(self) -> int:
        """The TMA copies of a tile: one per panel."""
        return self.block_n // self.panel

    def array(self) -> kernel_ir.Array:
        if self.layout == SWIZZLED:
            return kernel_ir.Array(self.name, self.dtype, (self.copies, self.block_m, self.panel), "shared",
                                   swizzle=kernel_ir.SWIZZLE_BYTES)
        return kernel_ir.Array(self.name, self.dtype, (self.block_m, self.block_n), "shared")

    def tensor_maps(self) -> list[kernel_ir.TensorMap]:
        swizzle = kernel_ir.SWIZZLE_BYTES if self.layout == SWIZZLED else 0
        shape = (self.c.extents[self.c.m], self.c.extents[self.c.n])
        return [kernel_ir.TensorMap(self.map_name, self.store.buffer, shape, self.stride,
                                    (self.block_m, self.panel), swizzle)]

    def put_pair(self, row_in_block: Expr, first_col: Expr, column: int, register: str) -> kernel_ir.Stmt:
        """A consumer's two adjacent epilogue values, in register array ``register``, into the tile at
        ``row_in_block`` and column ``first_col + column``: ``first_col`` is the thread's first (below 8),
        ``column`` a multiple of 8, so that the panel is known here."""
        if self.layout == SWIZZLED:
            at = (ex.const(column // self.panel), row_in_block, first_col + column % self.panel)
        else:
            at = (row_in_block, first_col + column)
        return kernel_ir.VectorStore(self.name, at, register, (ex.const(0),), 2)

    def after_puts(self) -> list[kernel_ir.Stmt]:
        """What each consumer thread does once its values are in: make them visible to the TMA."""
        return [kernel_ir.AsyncProxyFence()]

    def copy_out(self) -> list[kernel_ir.Stmt]:
        """After the block's barrier: thread 0 stores each panel that starts inside the output (a
        TMA store must start there), then waits until the copies have read the tile."""
        first_row, first_col = self.block_row * self.block_m, self.block_col * self.block_n
        stores: list[kernel_ir.Stmt] = []
        for p in range(self.copies):
            column = first_col + self.panel * p
            src = (ex.const(p), ex.const(0), ex.const(0)) if self.layout == SWIZZLED else (ex.const(0), ex.const(0))
            copy = kernel_ir.TmaStore(self.map_name, first_row, column, self.name, src)
            whole = self.c.extents[self.c.n] % self.block_n == 0 or p == 0
            stores.append(copy if whole else kernel_ir.If(ex.op("lt", column, self.c.extents[self.c.n]), [copy]))
        return [kernel_ir.If(ex.op("eq", kernel_ir.thread_idx("x"), 0),
                             [*stores, kernel_ir.TmaStoreCommit(), kernel_ir.TmaStoreWait(0)])]

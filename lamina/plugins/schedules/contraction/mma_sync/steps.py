"""The contraction's k-tiles multiplied on the tensor cores, written as Kernel IR.

Each step of eight k, each thread reads its pieces of the mma fragments from the staged
k-tiles, splits each into big and small tf32 parts, and for each pair of its rows and run
of its columns sums the three products from zero on the tensor cores before adding them to
its accumulators in float32 (``products`` says why).
"""

from __future__ import annotations

from lamina.core.ir import expr as ex, kernel_ir
from lamina.core.ir.dtypes import DType
from lamina.core.ir.expr import Expr
from lamina.plugins.schedules.contraction.layout import BlockLayout, KernelNames
from lamina.plugins.schedules.contraction.mma_sync import products as mma_sync
from lamina.plugins.schedules.contraction.recognise import Operand

PIECES = ("a_big", "a_small", "b_big", "b_small", "step_sum")


class TensorCoreSteps:
    """The tensor-core steps of a block (``BlockLayout``) whose sum is the product of ``factors``
    (the m-side and the n-side operand), its registers of ``dtype`` named from ``names``."""

    def __init__(self, names: KernelNames, factors: tuple[Operand, Operand], dtype: DType):
        self.m_side, self.n_side = factors
        self.names = {piece: names.fresh(piece) for piece in PIECES}
        self.dtype = dtype

    def k_tile(self, w: BlockLayout, slot: Expr) -> kernel_ir.For:
        """The k-tile from ``slot`` in steps of eight: the n side's fragments of every run of
        columns first, then, one pair of rows at a time, the m side's and their products.

        Thread (``group``, ``quad``) of its warp's patch reads the k-steps ``quad`` and
        ``quad + 4`` of its own rows for A, and of the patch's ``group``-th column of each
        run for B (the patch's columns are ``2 * PATCH_COLUMNS`` wide per run)."""
        a_tile, b_tile = w.tiles[self.m_side.text], w.tiles[self.n_side.text]
        quad = w.thread_col % mma_sync.PATCH_COLUMNS
        group = w.thread_row % mma_sync.PATCH_ROWS
        first_column = w.thread_col // mma_sync.PATCH_COLUMNS * (mma_sync.PATCH_COLUMNS * 2) + group
        body: list[kernel_ir.Stmt] = []
        runs = self.runs(w)
        for j in range(runs):
            column = first_column + j * w.cols.threads * 2
            for h in range(2):
                raw = kernel_ir.Load(b_tile, (slot, w.kk + quad + 4 * h, column), self.n_side.load.dtype)
                body += self._split(raw, "b", (ex.const(j), ex.const(h)))
        for p in range(w.rows.per_thread // 2):
            for i in range(4):
                row = w.row_in_block(2 * p + i % 2)
                raw = kernel_ir.Load(a_tile, (slot, w.kk + quad + 4 * (i // 2), row), self.m_side.load.dtype)
                body += self._split(raw, "a", (ex.const(i),))
            for j in range(runs):
                acc = [(ex.const(2 * p + i // 2), ex.const(2 * j + i % 2)) for i in range(4)]
                body += self._products_of_step(w.acc, acc, j)
        return kernel_ir.For(w.kk.name, ex.const(0), ex.const(w.k_slice), mma_sync.MMA_K, body, unroll=True)

    @staticmethod
    def runs(w: BlockLayout) -> int:
        """A thread's runs of two columns."""
        return w.cols.per_thread // mma_sync.COLUMN_RUN

    def arrays(self, w: BlockLayout) -> list[kernel_ir.Array]:
        """The pieces of a row pair's A fragment and of every run's B fragment, and the sum of
        one step's products."""
        runs = self.runs(w)
        shapes = {"a_big": (4,), "a_small": (4,), "b_big": (runs, 2), "b_small": (runs, 2),
                  "step_sum": (4,)}
        return [kernel_ir.Array(self.names[n], self.dtype, shape, "register") for n, shape in shapes.items()]

    def _piece(self, name: str, at: tuple[Expr, ...]) -> kernel_ir.Load:
        return kernel_ir.Load(self.names[name], at, self.dtype)

    def _split(self, raw: Expr, side: str, at: tuple[Expr, ...]) -> list[kernel_ir.Stmt]:
        """``raw`` into its nearest tf32 (within the finite ones: ``products.big_piece``) and what is
        left, of which the mma reads the tf32 part (read once, into the small piece's register)."""
        value = self._piece(f"{side}_small", at)
        rest = ex.op("sub", value, self._piece(f"{side}_big", at))
        return [kernel_ir.Store(self.names[f"{side}_small"], at, raw),
                kernel_ir.Store(self.names[f"{side}_big"], at, mma_sync.big_piece(value)),
                kernel_ir.Store(self.names[f"{side}_small"], at, rest)]

    def _products_of_step(self, accumulators: str, acc: list[tuple[Expr, Expr]], j: int) -> list[kernel_ir.Stmt]:
        """The three products of one step of k for ``acc`` of ``accumulators`` (columns ``j``), summed
        from zero on the tensor cores and then added to ``acc`` with float32 additions: the
        tensor cores truncate each sum, so a long reduction run through them drifts toward
        zero, where float32 additions round to nearest."""
        step = self.names["step_sum"]
        out: list[kernel_ir.Stmt] = [kernel_ir.Store(step, (ex.const(i),), ex.const(0.0, self.dtype)) for i in range(4)]
        for a_size, b_size in (("small", "big"), ("big", "small"), ("big", "big")):
            a = [self._piece(f"a_{a_size}", (ex.const(i),)) for i in range(4)]
            b = [self._piece(f"b_{b_size}", (ex.const(j), ex.const(h))) for h in range(2)]
            out.append(kernel_ir.MmaTf32(step, [(ex.const(i),) for i in range(4)], a, b))
        for i, at in enumerate(acc):
            total = ex.op("add", kernel_ir.Load(accumulators, at, self.dtype),
                          kernel_ir.Load(step, (ex.const(i),), self.dtype))
            out.append(kernel_ir.Store(accumulators, at, total))
        return out

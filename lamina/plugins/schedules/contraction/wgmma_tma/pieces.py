"""What a Hopper GEMM block does per product where its kernel runs products of one input side by
side (``Contraction.pieces``, the ``join_products_of_one_input`` rule).

The grid's block columns run over the products' columns one product after the other; every
product's columns are a multiple of the block's, so a block's lie in one product. The block's
producer copies that product's weight through its own tensor map into the ring's B stage, where
the k-tiles of any product land alike, and its consumers run that product's epilogue, its columns
counted from the product's first. The choice is one comparison of the block's column with the
products' first blocks, the same for every thread of the block.
"""

from __future__ import annotations

from lamina.core.ir import expr as ex, kernel_ir
from lamina.core.ir.expr import Expr
from lamina.plugins.schedules.contraction.layout import KernelNames
from lamina.plugins.schedules.contraction.recognise import Contraction
from lamina.plugins.schedules.contraction.wgmma_tma import operands, setting
from lamina.plugins.schedules.contraction.wgmma_tma.epilogue import TmaGemmEpilogue


class SideBySidePieces:
    """The B copies, tensor maps and epilogue of a block whose columns lie in one of ``c.pieces``."""

    def __init__(self, c: Contraction, names: KernelNames, block_col: Expr, block_n: int, epilogue_of):
        self.c, self.block_col, self.block_n = c, block_col, block_n
        self.maps = [names.fresh(f"{p.column_operand.load.buffer}_map") for p in c.pieces]
        self.first_blocks = [p.first_column // block_n for p in c.pieces]
        self.epilogues: list[TmaGemmEpilogue] = [epilogue_of(p.contraction, self.block_col_in(i))
                                                 for i, p in enumerate(c.pieces)]
        """Each product's epilogue; ``epilogue_of(contraction, block column)`` builds one."""

    def block_col_in(self, piece: int) -> Expr:
        """The block's column among the product's own blocks."""
        return self.block_col - self.first_blocks[piece]

    def _chosen(self, per_piece: list[list[kernel_ir.Stmt]]) -> list[kernel_ir.Stmt]:
        """``per_piece[i]`` run where the block's columns lie in product ``i``."""
        chosen = per_piece[-1]
        for i in range(len(per_piece) - 2, -1, -1):
            chosen = [kernel_ir.If(ex.op("lt", self.block_col, self.first_blocks[i + 1]), per_piece[i], chosen)]
        return chosen

    def loads(self, tile: str, stage: Expr, k_tile: Expr, full: str, batch_env: dict[str, Expr]) -> list[kernel_ir.Stmt]:
        """The copy of k-tile ``k_tile`` of the block's rows of its product's weight into B's ``stage``."""
        per_piece = []
        for i, piece in enumerate(self.c.pieces):
            view = operands.view(piece.contraction, piece.column_operand)
            row = view.first_row(batch_env) + self.block_col_in(i) * self.block_n
            column = view.first_column(batch_env) + k_tile * setting.BLOCK_K
            per_piece.append([kernel_ir.TmaLoad(tile, (stage, ex.const(0), ex.const(0)), self.maps[i], row, column,
                                                full, (stage,))])
        return self._chosen(per_piece)

    def tensor_maps(self) -> list[kernel_ir.TensorMap]:
        """A K-major tensor map of each product's weight, in boxes of the block's rows by one k-tile."""
        maps = []
        for name, piece in zip(self.maps, self.c.pieces):
            view = operands.view(piece.contraction, piece.column_operand)
            maps.append(kernel_ir.TensorMap(name, piece.column_operand.load.buffer, (view.rows, view.columns),
                                            view.row_stride, (self.block_n, setting.BLOCK_K), kernel_ir.SWIZZLE_BYTES))
        return maps

    # --- the epilogue, as ``TmaGemmEpilogue`` offers it ----------------------------

    def before_products(self) -> list[kernel_ir.Stmt]:
        return []

    def statements(self) -> list[kernel_ir.Stmt]:
        return self._chosen([e.statements() for e in self.epilogues])

    def arrays(self) -> list[kernel_ir.Array]:
        return [a for e in self.epilogues for a in e.arrays()]

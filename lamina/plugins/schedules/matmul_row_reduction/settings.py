"""The matmul-with-row-reduction schedule's decisions in its Tile IR: the contraction's, and
how many blocks along x hold parts of each row where the last of them to finish combines the
rows (``last_block``)."""

from __future__ import annotations

import attrs

from lamina.core.ir import tile_ir
from lamina.plugins.schedules.contraction import ContractionSettings


@attrs.frozen
class RowSettings(ContractionSettings):
    """``blocks_combined_by_last_block``: that many blocks along x each store their part of a
    block's rows, and the last of them to finish reads the rows back and reduces them (the
    ``last_block`` reduction strategy); 1 where a block or a cluster holds each row."""

    blocks_combined_by_last_block: int = 1

    def blocks_along_x(self, tk: tile_ir.TileKernel) -> int:
        return self.blocks_combined_by_last_block

    def reduction_text(self, tk: tile_ir.TileKernel) -> str:
        blocks = self.blocks_combined_by_last_block
        if blocks == 1:
            return ""
        return f", across {blocks} blocks along x, the rows combined by the last block to finish"

    def problems(self, tk: tile_ir.TileKernel) -> list[str]:
        problems = super().problems(tk)
        last_block = tk.reduction is not None and tk.reduction.strategy == "last_block"
        if (self.blocks_combined_by_last_block > 1) != last_block:
            strategy = tk.reduction.strategy if tk.reduction is not None else "no"
            problems.insert(0, f"{self.blocks_combined_by_last_block} blocks combined by the last block with the "
                               f"{strategy} strategy: rows combined by the last block are the last_block strategy's")
        return problems

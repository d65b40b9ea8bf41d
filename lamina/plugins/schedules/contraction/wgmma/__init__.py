"""Products on Hopper's warpgroup ``wgmma`` from operands the block's threads stage: float32, each
operand as two tf32 pieces, or 16-bit ones as they are (``products`` says when and why,
``writer`` writes the kernel)."""

from lamina.plugins.schedules.contraction.wgmma.products import (BLOCK_K, BLOCK_MS, BLOCK_NS, choices_for, sixteen_bit,
                                                                 staged_row)
from lamina.plugins.schedules.contraction.wgmma.products import uses as runs_on_wgmma
from lamina.plugins.schedules.contraction.wgmma.writer import WarpgroupWriter

__all__ = ["BLOCK_K", "BLOCK_MS", "BLOCK_NS", "WarpgroupWriter", "choices_for", "runs_on_wgmma", "sixteen_bit",
           "staged_row"]

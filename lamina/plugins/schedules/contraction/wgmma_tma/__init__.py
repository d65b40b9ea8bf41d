"""bf16 and fp16 products as a Hopper GEMM (``products = wgmma_tma``): TMA copies into a ring
of stages guarded by mbarriers, a producer warpgroup and consumer warpgroups running wgmma
(``setting`` says which contractions and settings, ``cost`` what they are expected to take,
``tiling`` their Tile IR, ``writer`` and ``epilogue`` their Kernel IR)."""

from lamina.plugins.schedules.contraction.wgmma_tma.k_major_operands import copy_k_major, tma_reads_with_a_copy
from lamina.plugins.schedules.contraction.wgmma_tma.setting import uses as runs_on_wgmma_tma
from lamina.plugins.schedules.contraction.wgmma_tma.tiling import PRODUCTS as TMA_PRODUCTS
from lamina.plugins.schedules.contraction.wgmma_tma.tiling import TmaGemmSettings

__all__ = ["TMA_PRODUCTS", "copy_k_major", "TmaGemmSettings", "runs_on_wgmma_tma", "tma_reads_with_a_copy"]

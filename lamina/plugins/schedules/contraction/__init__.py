"""The contraction schedule: tiled matmuls with operands staged in shared memory, split across
blocks (split-K) where the grid would leave SMs idle.

The shared tiling, copy layout, cost model and writer live here; the products' instructions in
``mma_sync`` and ``wgmma``, split-K in ``split_k``. Other schedules built on a contraction's
block (``matmul_row_reduction``) use only the names below and those of the sub-packages."""

from lamina.plugins.schedules.contraction.arrangement import warp_patch
from lamina.plugins.schedules.contraction.copy_layout import describe as describe_copies
from lamina.plugins.schedules.contraction.cost import Estimate, candidates, estimate
from lamina.plugins.schedules.contraction.cost import choose as cheapest_setting
from lamina.plugins.schedules.contraction.knobs import FMA, FORMER_KNOB_NAMES, KNOB_NAMES, KNOBS, MMA_SYNC, PRODUCTS, WGMMA, Choices
from lamina.plugins.schedules.contraction.knobs import pins_text, read_pinned
from lamina.plugins.schedules.contraction.layout import BlockLayout
from lamina.plugins.schedules.contraction.lowering import ContractionWriter
from lamina.plugins.schedules.contraction.plugin import ContractionSchedule
from lamina.plugins.schedules.contraction.recognise import Contraction, NotAContraction, Operand, analyse
from lamina.plugins.schedules.contraction.schedule import estimate_contraction, schedule_contraction
from lamina.plugins.schedules.contraction.settings import MMA_PRODUCTS, WGMMA_PRODUCTS, ContractionSettings
from lamina.plugins.schedules.contraction.settings import settings_of
from lamina.plugins.schedules.contraction.split_k import (
    PartialOf,
    SplitChoice,
    SplitContraction,
    SplitContractionsAcrossBlocks,
    UnrolledReductionSchedule,
    partial_of,
    split,
)
from lamina.plugins.schedules.contraction.tiling import SCHEDULE_NAME, column_run, copy_order, stage_for
from lamina.plugins.schedules.contraction.unneeded_blocks import unneeded_where
from lamina.plugins.schedules.contraction.writers import lower_contraction

__all__ = [
    "BlockLayout",
    "Choices",
    "Contraction",
    "ContractionSchedule",
    "ContractionSettings",
    "ContractionWriter",
    "Estimate",
    "FMA",
    "KNOBS",
    "FORMER_KNOB_NAMES",
    "KNOB_NAMES",
    "MMA_PRODUCTS",
    "MMA_SYNC",
    "NotAContraction",
    "Operand",
    "PRODUCTS",
    "PartialOf",
    "SCHEDULE_NAME",
    "SplitChoice",
    "SplitContraction",
    "SplitContractionsAcrossBlocks",
    "UnrolledReductionSchedule",
    "WGMMA",
    "WGMMA_PRODUCTS",
    "analyse",
    "candidates",
    "cheapest_setting",
    "column_run",
    "copy_order",
    "describe_copies",
    "estimate",
    "estimate_contraction",
    "lower_contraction",
    "partial_of",
    "pins_text",
    "read_pinned",
    "schedule_contraction",
    "settings_of",
    "split",
    "stage_for",
    "unneeded_where",
    "warp_patch",
]

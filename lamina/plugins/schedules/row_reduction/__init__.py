"""The row-reduction schedule: a warp or a block per row, partial results combined by warp shuffles."""

from lamina.plugins.schedules.row_reduction.cost import estimate_cost
from lamina.plugins.schedules.row_reduction.recognise import NotARowReduction, RowReduction, analyse
from lamina.plugins.schedules.row_reduction.schedule import RowReductionSchedule
from lamina.plugins.schedules.row_reduction.tiling import decide

__all__ = ["NotARowReduction", "RowReduction", "RowReductionSchedule", "analyse", "decide", "estimate_cost"]

"""The contraction schedule: tiled matmuls with operands staged in shared memory."""

from lamina.plugins.schedules.contraction.lowering import lower_contraction
from lamina.plugins.schedules.contraction.plugin import ContractionSchedule
from lamina.plugins.schedules.contraction.recognise import Contraction, NotAContraction, Operand, analyse
from lamina.plugins.schedules.contraction.tiling import KNOB_DEFAULTS, read_knobs, schedule_contraction

__all__ = [
    "Contraction",
    "ContractionSchedule",
    "KNOB_DEFAULTS",
    "NotAContraction",
    "Operand",
    "analyse",
    "lower_contraction",
    "read_knobs",
    "schedule_contraction",
]

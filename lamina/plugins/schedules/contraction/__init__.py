"""The contraction schedule: tiled matmuls with operands staged in shared memory."""

from lamina.plugins.schedules.contraction.cost import Estimate, candidates, estimate
from lamina.plugins.schedules.contraction.knobs import KNOB_NAMES, Choices, read_pinned
from lamina.plugins.schedules.contraction.lowering import lower_contraction
from lamina.plugins.schedules.contraction.plugin import ContractionSchedule
from lamina.plugins.schedules.contraction.recognise import Contraction, NotAContraction, Operand, analyse
from lamina.plugins.schedules.contraction.schedule import estimate_contraction, schedule_contraction

__all__ = [
    "Choices",
    "Contraction",
    "ContractionSchedule",
    "Estimate",
    "KNOB_NAMES",
    "NotAContraction",
    "Operand",
    "analyse",
    "candidates",
    "estimate",
    "estimate_contraction",
    "lower_contraction",
    "read_pinned",
    "schedule_contraction",
]

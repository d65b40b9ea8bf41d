"""The contraction schedule: tiled matmuls with operands staged in shared memory, split across
blocks (split-K) where the grid would leave SMs idle."""

from lamina.plugins.schedules.contraction.cost import Estimate, candidates, estimate
from lamina.plugins.schedules.contraction.knobs import KNOB_NAMES, Choices, read_pinned
from lamina.plugins.schedules.contraction.writers import lower_contraction
from lamina.plugins.schedules.contraction.partial_sums import PartialOf, SplitContraction, partial_of, split
from lamina.plugins.schedules.contraction.plugin import ContractionSchedule
from lamina.plugins.schedules.contraction.recognise import Contraction, NotAContraction, Operand, analyse
from lamina.plugins.schedules.contraction.schedule import estimate_contraction, schedule_contraction
from lamina.plugins.schedules.contraction.split_k import SplitChoice, SplitContractionsAcrossBlocks
from lamina.plugins.schedules.contraction.unrolled_reduction import UnrolledReductionSchedule

__all__ = [
    "Choices",
    "Contraction",
    "ContractionSchedule",
    "Estimate",
    "KNOB_NAMES",
    "NotAContraction",
    "Operand",
    "PartialOf",
    "SplitChoice",
    "SplitContraction",
    "SplitContractionsAcrossBlocks",
    "UnrolledReductionSchedule",
    "analyse",
    "candidates",
    "estimate",
    "estimate_contraction",
    "lower_contraction",
    "partial_of",
    "read_pinned",
    "schedule_contraction",
    "split",
]

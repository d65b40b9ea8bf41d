"""Split-K: a contraction whose grid leaves SMs idle split across blocks into partial sums
(``partial_sums``), chosen by a fusion rule (``fusion_rule``), and the short unrolled sum that
adds them up (``unrolled_reduction``)."""

from lamina.plugins.schedules.contraction.split_k.partial_sums import PartialOf, SplitContraction, partial_of, split
from lamina.plugins.schedules.contraction.split_k.unrolled_reduction import UnrolledReductionSchedule
from lamina.plugins.schedules.contraction.split_k.fusion_rule import SplitChoice, SplitContractionsAcrossBlocks

__all__ = ["PartialOf", "SplitChoice", "SplitContraction", "SplitContractionsAcrossBlocks",
           "UnrolledReductionSchedule", "partial_of", "split"]

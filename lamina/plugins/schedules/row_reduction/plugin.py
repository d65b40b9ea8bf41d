"""Registers the row-reduction schedule (norms, softmax and means, a warp or a block per row) and the
rules for a decoding step's matrix-vector products: each computing the norm of its vector itself,
and those of one input in one launch."""

from lamina.core.hookspecs import hookimpl
from lamina.plugins.schedules.row_reduction.joined import JoinMatrixVectorProducts
from lamina.plugins.schedules.row_reduction.schedule import RowReductionSchedule
from lamina.plugins.schedules.row_reduction.vector_reductions import ComputeVectorReductionInEachProduct


@hookimpl
def lamina_register_schedules(register):
    register(RowReductionSchedule())


@hookimpl
def lamina_register_fusion_rules(register):
    register(ComputeVectorReductionInEachProduct())
    register(JoinMatrixVectorProducts())

"""Registers the row-reduction schedule: norms, softmax and means, a warp or a block per row."""

from lamina.core.hookspecs import hookimpl
from lamina.plugins.schedules.row_reduction.schedule import RowReductionSchedule


@hookimpl
def lamina_register_schedules(register):
    register(RowReductionSchedule())

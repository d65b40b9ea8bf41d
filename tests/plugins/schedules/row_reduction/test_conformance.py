"""The row-reduction schedule, checked by the conformance kit like any schedule plugin."""

from lamina.plugins.schedules.row_reduction import plugin as row_reduction
from lamina.testing import SchedulePluginSuite


class TestRowReductionSchedule(SchedulePluginSuite):
    plugin = row_reduction
    programs = ("row_sum", "softmax", "mean_and_max")

"""The transpose schedule, checked by the conformance kit like any schedule plugin."""

from lamina.plugins.schedules.transpose import plugin as transpose
from lamina.testing import SchedulePluginSuite


class TestTransposeSchedule(SchedulePluginSuite):
    plugin = transpose

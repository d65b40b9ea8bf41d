"""The pointwise schedule, checked by the conformance kit like any schedule plugin."""

from lamina.plugins.schedules.pointwise import plugin as pointwise
from lamina.testing import SchedulePluginSuite


class TestPointwiseSchedule(SchedulePluginSuite):
    plugin = pointwise

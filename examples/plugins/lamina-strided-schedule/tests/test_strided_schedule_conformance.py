"""lamina's conformance kit on this plugin: every representative program, pinned to the strided schedule."""

from lamina.testing import SchedulePluginSuite

import lamina_strided_schedule.plugin


class TestStridedSchedule(SchedulePluginSuite):
    plugin = lamina_strided_schedule.plugin

"""lamina's own schedules, checked by the conformance kit like any schedule plugin."""

from lamina.plugins.schedules.contraction import plugin as contraction
from lamina.plugins.schedules.matmul_row_reduction import plugin as matmul_row_reduction
from lamina.plugins.schedules.generic import plugin as generic
from lamina.testing import SchedulePluginSuite


class TestGenericSchedule(SchedulePluginSuite):
    plugin = generic


class TestContractionSchedule(SchedulePluginSuite):
    plugin = contraction
    programs = ("matmul", "ragged_matmul", "batched_matmul", "linear_silu")


class TestMatmulRowReductionSchedule(SchedulePluginSuite):
    plugin = matmul_row_reduction
    programs = ("attention_scores",)

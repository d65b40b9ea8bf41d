"""The object registered under the ``lamina.plugins`` entry point ``strided_schedule``."""

from __future__ import annotations

from lamina.core.hookspecs import hookimpl

from lamina_strided_schedule.schedule import StridedSchedule

lamina_requires = ">=0.1"
"""The lamina versions whose hook specs and Tile IR this plugin was written against."""


@hookimpl
def lamina_register_schedules(register):
    register(StridedSchedule())

"""Registers the generic schedule, the fallback that applies to every loop kernel."""

from lamina.core.hookspecs import hookimpl
from lamina.plugins.schedules.generic.schedule import GenericSchedule


@hookimpl
def lamina_register_schedules(register):
    register(GenericSchedule())

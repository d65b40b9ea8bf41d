"""Registers the transpose schedule: copies that read their input across rows, through shared memory."""

from lamina.core.hookspecs import hookimpl
from lamina.plugins.schedules.transpose.schedule import TransposeSchedule


@hookimpl
def lamina_register_schedules(register):
    register(TransposeSchedule())

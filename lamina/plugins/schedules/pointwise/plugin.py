"""Registers the pointwise schedule: vectorised elementwise kernels."""

from lamina.core.hookspecs import hookimpl
from lamina.plugins.schedules.pointwise.schedule import PointwiseSchedule


@hookimpl
def lamina_register_schedules(register):
    register(PointwiseSchedule())

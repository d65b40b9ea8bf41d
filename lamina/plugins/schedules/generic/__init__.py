"""The generic schedule: one thread per output point, serial reductions."""

from lamina.plugins.schedules.generic.schedule import GenericSchedule

__all__ = ["GenericSchedule"]

"""The transpose schedule: copies that read their input across rows, exchanged through shared memory."""

from lamina.plugins.schedules.transpose.schedule import TransposeSchedule

__all__ = ["TransposeSchedule"]

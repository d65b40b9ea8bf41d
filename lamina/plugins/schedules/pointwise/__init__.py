"""The pointwise schedule: elementwise kernels with 16-byte vector loads and stores."""

from lamina.plugins.schedules.pointwise.schedule import PointwiseSchedule

__all__ = ["PointwiseSchedule"]

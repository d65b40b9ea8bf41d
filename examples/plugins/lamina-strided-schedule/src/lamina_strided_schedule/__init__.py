"""lamina-strided-schedule: several elements per thread for pointwise kernels."""

from lamina_strided_schedule.schedule import StridedSchedule

__all__ = ["StridedSchedule"]

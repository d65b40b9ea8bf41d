"""Where a measurement was made, and whether it still describes this process's kernels."""

from __future__ import annotations

import functools

import torch

from lamina.contrib.autotune.database import Entry
from lamina.core.version import __version__


@functools.cache
def driver_version() -> str | None:
    """The CUDA driver's version, None where there is none."""
    try:
        from cuda.bindings import driver
        error, version = driver.cuDriverGetVersion()
    except Exception:  # no cuda-python, or no driver library: a host without a GPU
        return None
    return str(version) if error == driver.CUresult.CUDA_SUCCESS else None


def device_name() -> str | None:
    return torch.cuda.get_device_name() if torch.cuda.is_available() else None


def usable(entry: Entry) -> bool:
    """Measured with this lamina and this driver: another version's kernels, or another driver's
    compiler, may run otherwise."""
    return entry.lamina == __version__ and entry.driver == driver_version()

"""Where NVRTC finds CUDA's headers (``cuda_fp16.h``, ``cuda_bf16.h``).

The pip NVRTC wheel ships no headers, so a kernel that includes one needs them from
somewhere else: the ``nvidia-cuda-runtime`` wheel, or a CUDA toolkit. Float32,
integer and bool kernels include nothing and never come here.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from lamina.core.errors import LaminaError

INSTALL_HINT = (
    "install CUDA's headers with `pip install nvidia-cuda-runtime` "
    "(`nvidia-cuda-runtime-cu12` for CUDA 12), or set CUDA_HOME to a CUDA toolkit"
)


def _pathfinder_dirs(libname: str) -> list[Path]:
    try:
        import cuda.pathfinder as pathfinder
    except ImportError:
        return []
    try:
        if hasattr(pathfinder, "locate_nvidia_header_directory"):
            found = pathfinder.locate_nvidia_header_directory(libname)
            return [Path(found.abs_path)] if found is not None else []
        found = pathfinder.find_nvidia_header_directory(libname)
        return [Path(found)] if found else []
    except Exception:  # noqa: BLE001 - a failed probe only means "not found there"
        return []


def _wheel_dirs() -> list[Path]:
    try:
        import nvidia
    except ImportError:
        return []
    dirs = []
    for base in getattr(nvidia, "__path__", []):
        for sub in ("cuda_runtime", "cu13", "cu12"):
            dirs.append(Path(base) / sub / "include")
    return dirs


def _toolkit_dirs() -> list[Path]:
    roots = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")]
    return [Path(r) / "include" for r in roots if r] + [Path("/usr/local/cuda/include")]


def candidate_dirs() -> list[Path]:
    """Every directory that may hold CUDA's headers, most specific first."""
    return _pathfinder_dirs("cudart") + _wheel_dirs() + _toolkit_dirs()


@functools.cache
def include_dirs(headers: tuple[str, ...]) -> tuple[Path, ...] | None:
    """The include directories that provide every header of ``headers``, or None."""
    for directory in candidate_dirs():
        if all((directory / h).is_file() for h in headers):
            extra = [d for d in [directory / "cccl", *_pathfinder_dirs("cccl")] if d.is_dir()]
            return (directory, *dict.fromkeys(extra))
    return None


def include_options(headers: tuple[str, ...], kernel: str) -> tuple[str, ...]:
    """NVRTC options that make ``headers`` findable, or a LaminaError saying what to install."""
    if not headers:
        return ()
    found = include_dirs(tuple(sorted(set(headers))))
    if found is None:
        raise LaminaError(
            f"kernel {kernel} includes {', '.join(headers)}, which the NVRTC wheel does not ship "
            f"and lamina found nowhere else; {INSTALL_HINT}"
        )
    return tuple(f"--include-path={d}" for d in found)

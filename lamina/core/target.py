"""Targets: the device a program is compiled for, and the limits its schedules must respect."""

from __future__ import annotations

import attrs


@attrs.frozen
class Target:
    name: str
    arch: str  # what NVRTC calls it: sm_90
    sm_count: int = 132
    max_threads_per_block: int = 1024
    max_shared_bytes_per_block: int = 48 * 1024
    max_shared_bytes_optin: int = 227 * 1024
    registers_per_thread: int = 255
    warp_size: int = 32
    shared_banks: int = 32

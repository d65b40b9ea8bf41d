"""The knobs of the contraction schedule, and the checks on the values a user pins."""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from lamina.core.errors import ScheduleError

KNOB_NAMES = (
    "block_m", "block_n", "block_k", "thread_m", "thread_n", "splits", "buffers", "padding", "fragment_width",
    "warp_columns", "grouped_rows", "copy_steps", "tensor_cores",
)
MAX_BUFFERS = 3
FRAGMENT_WIDTHS = (4, 1)
"""The widths a thread's register-tile rows and columns may be grouped by, the preferred first."""
WARP_COLUMNS = (1, 2, 4, 8, 16, 32)
"""How many of a warp's 32 threads may lie along a row of the block's threads."""


@attrs.frozen
class Choices:
    """One setting of the knobs.

    A block computes a ``block_m`` x ``block_n`` output tile with ``block_m / thread_m`` x
    ``block_n / thread_n`` threads, each holding a ``thread_m`` x ``thread_n`` register tile;
    ``splits`` groups of such threads share each ``block_k``-deep k-tile and add up their
    partial sums at the end. ``buffers`` k-tiles are in shared memory at once; ``padding``
    (None: chosen per operand) pads the rows of the staged tiles. A thread owns its rows and
    columns in runs of ``fragment_width`` adjacent ones, each read from shared memory in one
    access (1: single rows and columns, ``threads_m`` and ``threads_n`` apart).

    ``warp_columns`` and ``grouped_rows`` arrange threads and blocks without changing what
    a block computes (``arrangement``; None: not yet arranged, CUDA's order): each warp
    is a patch of ``32 / warp_columns`` x ``warp_columns`` of the block's threads, and blocks
    run down ``grouped_rows`` rows of the grid before the next column.

    ``copy_steps`` is when the next k-tile's copies are issued (``copy_issue``; None: not
    yet chosen): over the first ``copy_steps`` steps of k of each k-tile, a few at each, or
    all at once after the k-tile's barrier (0).

    ``tensor_cores`` (1) multiplies on the tensor cores, each float32 operand split into
    two tf32 pieces, with warp-wide ``mma.sync`` (``tensor_cores``) or (2) with Hopper's
    warpgroup ``wgmma`` (``warpgroup_products``), instead of with FMAs on the CUDA cores (0).
    """

    block_m: int
    block_n: int
    block_k: int
    thread_m: int
    thread_n: int
    splits: int = 1
    buffers: int = 2
    padding: int | None = None
    fragment_width: int = 1
    warp_columns: int | None = None
    grouped_rows: int | None = None
    copy_steps: int | None = None
    tensor_cores: int = 0

    @property
    def threads_m(self) -> int:
        return self.block_m // self.thread_m

    @property
    def threads_n(self) -> int:
        return self.block_n // self.thread_n

    @property
    def threads(self) -> int:
        return self.threads_m * self.threads_n * self.splits

    def summary(self) -> str:
        text = (
            f"block {self.block_m}x{self.block_n}x{self.block_k}, thread {self.thread_m}x{self.thread_n}, "
            f"splits {self.splits}, buffers {self.buffers}, fragment width {self.fragment_width}"
        )
        text += f", padding {self.padding}" if self.padding is not None else ""
        text += f", copies over {self.copy_steps} steps" if self.copy_steps else ""
        return text + {0: "", 1: ", on tensor cores", 2: ", on tensor cores through wgmma"}[self.tensor_cores]


def read_pinned(knobs: Mapping[str, Any], where: str) -> dict[str, int]:
    """The knobs of this schedule that ``knobs`` pins, checked one by one."""
    pinned = {}
    for key in KNOB_NAMES:
        if key not in knobs:
            continue
        value = knobs[key]
        if isinstance(value, bool) or not isinstance(value, int):
            raise ScheduleError(f"{where}: knob {key} must be an integer, not {value!r}")
        if key == "padding" and value < 0:
            raise ScheduleError(f"{where}: knob padding = {value} must be 0 or more elements")
        if key == "buffers" and not 1 <= value <= MAX_BUFFERS:
            raise ScheduleError(
                f"{where}: knob buffers = {value} must be 1 (no overlap), 2 (double buffering) or 3 (two k-tiles in flight)"
            )
        if key == "warp_columns" and value not in WARP_COLUMNS:
            raise ScheduleError(
                f"{where}: knob warp_columns = {value} must be one of {', '.join(map(str, WARP_COLUMNS))}: "
                "the threads of a warp along a row of the block's threads"
            )
        if key == "fragment_width" and value not in FRAGMENT_WIDTHS:
            raise ScheduleError(
                f"{where}: knob fragment_width = {value} must be 1 (rows and columns one by one) or 4 "
                "(in runs of four, read 16 bytes at a time)"
            )
        if key == "copy_steps" and value < 0:
            raise ScheduleError(
                f"{where}: knob copy_steps = {value} must be 0 (each k-tile's copies at once) or the steps of k "
                "over which they are spread"
            )
        if key == "tensor_cores" and value not in (0, 1, 2):
            raise ScheduleError(
                f"{where}: knob tensor_cores = {value} must be 0 (FMAs on the CUDA cores), 1 (mma on the tensor "
                "cores, each float32 operand as two tf32 pieces) or 2 (Hopper's wgmma on the same pieces)"
            )
        if key not in ("padding", "buffers", "copy_steps", "tensor_cores") and value <= 0:
            raise ScheduleError(f"{where}: knob {key} = {value} must be positive")
        pinned[key] = value
    return pinned

"""The strided schedule: each thread computes ``per_thread`` points of a pointwise kernel, ``threads`` apart.

Consecutive threads touch consecutive elements in every one of a thread's steps, so
accesses stay coalesced, while each thread amortises its index arithmetic over
several elements. It applies only to pointwise kernels (a nest of parallel loops
around stores) and has a negative priority: lamina's own schedules come first, and
this one runs only where the config names it (``schedule = "strided"``).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from lamina.core.errors import ScheduleError
from lamina.core.ir import kernel_ir, loop_ir, tile_ir
from lamina.core.target import Target
from lamina.plugins.schedules.loop_to_kernel import split_parallel_nest

from lamina_strided_schedule import lowering

DEFAULT_THREADS = 128
DEFAULT_PER_THREAD = 4
MAX_PER_THREAD = 16


def _knob(knobs: Mapping[str, Any], name: str, default: int, limit: int, multiple_of: int = 1) -> int:
    value = knobs.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= limit or value % multiple_of:
        multiple = f", a multiple of {multiple_of}" if multiple_of > 1 else ""
        raise ScheduleError(
            f"the knob {name} = {value!r} is not usable by the strided schedule: "
            f"it must be a whole number from {multiple_of} to {limit}{multiple}"
        )
    return value


class StridedSchedule:
    name = "strided"
    priority = -10
    knob_names = ("threads", "per_thread")

    def applies(self, kernel: loop_ir.Kernel, target: Target) -> bool:
        """Pointwise kernels only: parallel loops around nothing but stores."""
        loops, inner = split_parallel_nest(kernel.body)
        return bool(loops) and all(isinstance(s, loop_ir.Store) for s in inner)

    def schedule(self, kernel: loop_ir.Kernel, target: Target, knobs: Mapping[str, Any]) -> tile_ir.TileKernel:
        if not self.applies(kernel, target):
            raise ScheduleError(f"kernel {kernel.name} is not pointwise; the strided schedule handles pointwise kernels only")
        loops, _ = split_parallel_nest(kernel.body)
        total = math.prod(loop.extent for loop in loops)
        per_thread = _knob(knobs, "per_thread", DEFAULT_PER_THREAD, MAX_PER_THREAD)
        threads = _knob(knobs, "threads", DEFAULT_THREADS, target.max_threads_per_block, target.warp_size)
        if "threads" not in knobs:
            needed = math.ceil(total / per_thread / target.warp_size) * target.warp_size
            threads = max(target.warp_size, min(threads, needed))
        binding = tile_ir.AxisBinding(
            vars=tuple(loop.var for loop in loops), extent=total, block_dim="x",
            threads=threads, per_thread=per_thread, contiguous=False,
        )
        pinned = tuple((name, knobs[name]) for name in ("threads", "per_thread") if name in knobs)
        tile = tile_ir.TileKernel(kernel=kernel, schedule=self.name, grid=(binding,), knobs=pinned)
        tile_ir.verify_tile_kernel(tile, target.max_threads_per_block, target.max_shared_bytes_optin)
        return tile

    def lower(self, tile: tile_ir.TileKernel, target: Target) -> kernel_ir.Kernel:
        kernel = lowering.lower(tile)
        kernel_ir.verify_kernel(kernel, target.max_threads_per_block, target.max_shared_bytes_optin)
        return kernel

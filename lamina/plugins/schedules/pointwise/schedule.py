"""The pointwise schedule: elementwise kernels at the speed of memory.

Silu times up, RoPE, residual adds and casts read and write every element once and
compute little on it; what decides their speed is how the bytes move. Each thread
owns vectors of adjacent elements and reads and writes them with 16-byte accesses
wherever the layout allows, several vectors in flight at once, on a grid sized to the
SMs. Its priority (20) puts it ahead of the generic fallback.
"""

from __future__ import annotations

from typing import Any, Mapping

from lamina.core.errors import ScheduleError
from lamina.core.ir import kernel_ir, loop_ir, tile_ir
from lamina.core.selection import Setting
from lamina.core.target import Target
from lamina.plugins.schedules.pointwise import cost, lowering, tiling
from lamina.plugins.schedules.pointwise.analysis import pointwise_nest


class PointwiseSchedule:
    name = "pointwise"
    priority = 20
    knob_names = ("threads", "vector_width", "vectors_per_thread", "steps")
    symbolic_sizes = True

    def applies(self, kernel: loop_ir.Kernel, target: Target) -> bool:
        """Kernels of parallel loops around stores only: no reduction, no accumulator."""
        return pointwise_nest(kernel) is not None

    def schedule(self, kernel: loop_ir.Kernel, target: Target, knobs: Mapping[str, Any]) -> tile_ir.TileKernel:
        return tiling.tile(kernel, target, knobs, self.name)

    def lower(self, tile: tile_ir.TileKernel, target: Target) -> kernel_ir.Kernel:
        kernel = lowering.lower(tile)
        kernel_ir.verify_kernel(kernel, target.max_threads_per_block, target.max_shared_bytes_optin)
        return kernel

    def estimate_cost(self, kernel: loop_ir.Kernel, target: Target) -> float:
        """Microseconds: the bytes moved over the bandwidth the chosen accesses reach, plus a launch."""
        nest = tiling.nest_of(kernel)
        return cost.estimate_microseconds(kernel, target, tiling.choose_width(kernel, nest, target, {}))

    def best_settings(self, kernel: loop_ir.Kernel, target: Target, count: int) -> list[Setting]:
        """Its own decisions, then blocks of other sizes and more vectors per thread, at its vector
        width: the estimate, the bytes over the bandwidth, is the same for all of them, and only
        measuring tells them apart."""
        estimate = self.estimate_cost(kernel, target)
        own = tiling.decisions(self.schedule(kernel, target, {}))
        found = [own]
        for per_thread in ALTERNATIVE_VECTORS_PER_THREAD:
            for threads in ALTERNATIVE_THREADS:
                pins = {"vector_width": own.vector_width, "vectors_per_thread": per_thread, "threads": threads}
                try:
                    decisions = tiling.decisions(self.schedule(kernel, target, pins))
                except ScheduleError:
                    continue
                if decisions not in found:
                    found.append(decisions)
        return [Setting(self.name, {"vector_width": d.vector_width, "vectors_per_thread": d.vectors_per_thread,
                                    "threads": d.threads, "steps": d.steps}, estimate) for d in found[:count]]


ALTERNATIVE_THREADS = (128, 256, 512)
ALTERNATIVE_VECTORS_PER_THREAD = (1, 2, 4)

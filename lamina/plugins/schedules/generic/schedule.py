"""The generic schedule: correct for every loop kernel, fast for none in particular.

It is the fallback (priority 0) that guarantees every program compiles: one thread
per output point, reductions run serially in the thread.
"""

from __future__ import annotations

from typing import Any, Mapping

from lamina.core.ir import kernel_ir, loop_ir, tile_ir
from lamina.core.target import Target
from lamina.plugins.schedules.generic import lowering, tiling


class GenericSchedule:
    name = "generic"
    priority = 0
    knob_names = ("threads",)
    symbolic_sizes = True

    def applies(self, kernel: loop_ir.Kernel, target: Target) -> bool:
        """Always: loops inside the parallel nest, of any kind, run serially in the thread."""
        return True

    def schedule(self, kernel: loop_ir.Kernel, target: Target, knobs: Mapping[str, Any]) -> tile_ir.TileKernel:
        return tiling.tile(kernel, target, knobs, self.name)

    def lower(self, tile: tile_ir.TileKernel, target: Target) -> kernel_ir.Kernel:
        kernel = lowering.lower(tile)
        kernel_ir.verify_kernel(kernel, target.max_threads_per_block, target.max_shared_bytes_optin)
        return kernel

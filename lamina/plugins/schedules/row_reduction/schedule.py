"""The row-reduction schedule: norms, softmax, sums and means, one warp or block per row.

Threads of a row stride over it in 16-byte vectors where the row allows, combine their
partial results with warp shuffles (and a small shared-memory step across the warps of a
block), and keep the row in registers between its loops when it fits. Kernels of any
other shape are left to the other schedules (``applies`` is False).
"""

from __future__ import annotations

from typing import Any, Mapping

from lamina.core.ir import kernel_ir, loop_ir, tile_ir
from lamina.core.selection import Setting
from lamina.core.target import Target
from lamina.plugins.schedules.row_reduction import cost, lowering, tiling
from lamina.plugins.schedules.row_reduction.recognise import NotARowReduction, pieces


class RowReductionSchedule:
    name = tiling.SCHEDULE_NAME
    priority = 20
    knob_names = ("vector_width", "threads", "rows_per_block", "row_in_registers", "prefetch_epilogue_reads")
    former_knob_names = tuple(r.old for r in tiling.RENAMED)
    symbolic_sizes = True
    """Rows counted only at run time (a prompt's tokens), over rows whose length is a number."""

    def applies(self, kernel: loop_ir.Kernel, target: Target) -> bool:
        try:
            pieces(kernel)
        except NotARowReduction:
            return False
        return True

    def schedule(self, kernel: loop_ir.Kernel, target: Target, knobs: Mapping[str, Any]) -> tile_ir.TileKernel:
        return tiling.tile(kernel, target, knobs)

    def lower(self, tile: tile_ir.TileKernel, target: Target) -> kernel_ir.Kernel:
        kernel = lowering.lower(tile, target)
        kernel_ir.verify_kernel(kernel, target.max_threads_per_block, target.max_shared_bytes_optin)
        return kernel

    def estimate_cost(self, kernel: loop_ir.Kernel, target: Target) -> float:
        return cost.estimate_cost(kernel, target)

    def best_settings(self, kernel: loop_ir.Kernel, target: Target, count: int) -> list[Setting]:
        return cost.best_settings(kernel, target, count)

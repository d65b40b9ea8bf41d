"""The transpose schedule: a copy that reads its input across rows, through shared memory.

Each block exchanges a 32 x 32 tile: its threads read the tile along the input's rows
(``columns``, neighbouring threads on neighbouring elements), store it in shared memory, wait
for each other, and write it along the output's rows (``rows``). The tile's rows are padded by
one element, so that neither side's accesses to shared memory fall on one bank. Tiles past
either axis's end are cut by a bound; the other loops of the copy (heads, batches) are the
grid's third axis. Its priority (25) puts it ahead of the pointwise schedule, which would
read the input an element per row; the cost model prefers it for the same reason
(``pointwise.cost``).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from lamina.core.errors import ScheduleError
from lamina.core.ir import kernel_ir, loop_ir, tile_ir
from lamina.core.target import Target
from lamina.plugins.schedules.pointwise.cost import bytes_moved
from lamina.plugins.schedules.transpose import lowering
from lamina.plugins.schedules.transpose.analysis import MAX_GRID, transposed_copy

TILE = 32
"""Elements of each axis that a block exchanges: a warp's width, one row of the tile per warp access."""
ROWS_AT_ONCE = 8
"""Warps of a block: each moves every eighth row of the tile."""
EFFICIENCY = 0.8
"""Fraction of the copy bandwidth an exchange through shared memory reaches, below a
pointwise kernel's 16-byte accesses (``pointwise.cost.VECTOR_EFFICIENCY``): its accesses
are an element each, and a block waits once for its tile."""


class TransposeSchedule:
    name = "transpose"
    priority = 25
    knob_names = ()

    def applies(self, kernel: loop_ir.Kernel, target: Target) -> bool:
        """A copy of one buffer (cast or not) that reads it across the rows it writes, both axes
        at least 16 long."""
        copy = transposed_copy(kernel)
        return copy is not None and math.ceil(copy.columns.extent / TILE) <= MAX_GRID

    def schedule(self, kernel: loop_ir.Kernel, target: Target, knobs: Mapping[str, Any]) -> tile_ir.TileKernel:
        copy = transposed_copy(kernel)
        if copy is None:
            raise ScheduleError(
                f"kernel {kernel.name} is not a copy that reads one buffer across the rows it writes, so the "
                "transpose schedule cannot run it; leave the schedule unpinned or pin pointwise"
            )
        grid = [
            tile_ir.AxisBinding(vars=(copy.rows.var,), extent=copy.rows.extent, block_dim="x", threads=TILE),
            tile_ir.AxisBinding(vars=(copy.columns.var,), extent=copy.columns.extent, block_dim="y",
                                threads=ROWS_AT_ONCE, per_thread=TILE // ROWS_AT_ONCE, thread_dim="y",
                                contiguous=False),
        ]
        if copy.batch:
            grid.append(tile_ir.AxisBinding(vars=tuple(loop.var for loop in copy.batch), extent=copy.batch_extent,
                                            block_dim="z", threads=1, thread_dim="z"))
        stage = tile_ir.SharedStage(
            buffer=copy.load.buffer, index=loop_ir.format_value(copy.load), dims=(copy.rows.var, copy.columns.var),
            tile=(TILE, TILE), dtype=copy.load.dtype, padding=1, copy_bytes=copy.load.dtype.itemsize,
        )
        result = tile_ir.TileKernel(kernel=kernel, schedule=self.name, grid=tuple(grid), stages=(stage,))
        tile_ir.verify_tile_kernel(result, target.max_threads_per_block, target.max_shared_bytes_optin)
        return result

    def lower(self, tile: tile_ir.TileKernel, target: Target) -> kernel_ir.Kernel:
        kernel = lowering.lower(tile)
        kernel_ir.verify_kernel(kernel, target.max_threads_per_block, target.max_shared_bytes_optin)
        return kernel

    def estimate_cost(self, kernel: loop_ir.Kernel, target: Target) -> float:
        """Microseconds: the bytes moved at ``EFFICIENCY`` of the copy bandwidth, plus a launch."""
        return bytes_moved(kernel) / (target.memory_bytes_per_us * EFFICIENCY) + target.launch_us

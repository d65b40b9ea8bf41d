"""Registers the ``matmul_row_reduction`` schedule and the fusion rule that gives it its kernels."""

from __future__ import annotations

from typing import Any, Mapping

from lamina.core.errors import ScheduleError
from lamina.core.hookspecs import hookimpl
from lamina.core.ir import kernel_ir, loop_ir, tile_ir
from lamina.core.target import Target
from lamina.plugins.schedules.contraction import FORMER_KNOB_NAMES, KNOB_NAMES
from lamina.plugins.schedules.matmul_row_reduction import tiling
from lamina.plugins.schedules.matmul_row_reduction.fuse_contraction_into_row_reduction import (
    FuseContractionIntoRowReduction,
)
from lamina.plugins.schedules.matmul_row_reduction.lowering import lower_matmul_row_reduction
from lamina.plugins.schedules.matmul_row_reduction.recognise import NotContractionRows, analyse
from lamina.plugins.schedules.passing_over import tile_or_pass_over


class MatmulRowReductionSchedule:
    """Row reductions whose elements are a contraction's (softmax of attention scores)."""

    name = tiling.SCHEDULE_NAME
    former_names = tiling.FORMER_NAMES
    priority = 10
    knob_names = (*KNOB_NAMES, tiling.ROW_COMBINE_KNOB)
    former_knob_names = (*FORMER_KNOB_NAMES, *(r.old for r in tiling.RENAMED))

    def applies(self, kernel: loop_ir.Kernel, target: Target) -> bool:
        try:
            analyse(kernel)
        except NotContractionRows:
            return False
        return True

    def schedule(self, kernel: loop_ir.Kernel, target: Target, knobs: Mapping[str, Any]) -> tile_ir.TileKernel:
        """The kernel's Tile IR; where no setting can run it and none of this schedule's knobs is
        pinned, ``NoSettingRuns``, so that the next schedule takes it."""
        return tile_or_pass_over(lambda: tiling.tile(analyse(kernel), target, knobs), knobs)

    def estimate_cost(self, kernel: loop_ir.Kernel, target: Target) -> float:
        try:
            return tiling.choose(analyse(kernel), target, {})[1].total_us
        except ScheduleError:
            return float("inf")

    def lower(self, tile: tile_ir.TileKernel, target: Target) -> kernel_ir.Kernel:
        return lower_matmul_row_reduction(tile, target)


@hookimpl
def lamina_register_schedules(register):
    register(MatmulRowReductionSchedule())


@hookimpl
def lamina_register_fusion_rules(register):
    register(FuseContractionIntoRowReduction())

"""Registers the contraction schedule (tiled, shared-memory staged, multi-buffered matmuls), the
split-K fusion rule for contractions whose grid leaves SMs idle, the schedule of its combine, and
the rule that stores an operand K-major for the TMA GEMM."""

from __future__ import annotations

from typing import Any, Mapping

from lamina.core.hookspecs import hookimpl
from lamina.core.ir import kernel_ir, loop_ir, tile_ir
from lamina.core.selection import Setting
from lamina.core.target import Target
from lamina.plugins.schedules.contraction.knobs import FORMER_KNOB_NAMES, KNOB_NAMES, PIPELINE_KNOB_NAMES
from lamina.plugins.schedules.contraction.writers import lower_contraction
from lamina.plugins.schedules.contraction.recognise import NotAContraction, analyse
from lamina.plugins.schedules.contraction.schedule import (best_contraction_settings, estimate_contraction,
                                                            schedule_contraction)
from lamina.plugins.schedules.contraction.split_k.fusion_rule import SplitContractionsAcrossBlocks
from lamina.plugins.schedules.contraction.tiling import SCHEDULE_NAME, grid_fits
from lamina.plugins.schedules.contraction.split_k.unrolled_reduction import UnrolledReductionSchedule
from lamina.plugins.schedules.contraction.wgmma_tma.gated_products import PairGatedProducts
from lamina.plugins.schedules.contraction.wgmma_tma.joined_products import JoinProductsOfOneInput
from lamina.plugins.schedules.contraction.wgmma_tma.k_major_operands import StoreTmaOperandsKMajor
from lamina.plugins.schedules.contraction.wgmma_tma.padded_rows import PadTmaOperandRows
from lamina.plugins.schedules.contraction.wgmma_tma.reordered_axes import ReorderTmaOperandAxes


class ContractionSchedule:
    """Matmul-shaped kernels (batched, transposed, broadcast, with prologue and epilogue)."""

    name = SCHEDULE_NAME
    priority = 10
    knob_names = KNOB_NAMES + PIPELINE_KNOB_NAMES
    former_knob_names = FORMER_KNOB_NAMES
    symbolic_sizes = True

    def applies(self, kernel: loop_ir.Kernel, target: Target) -> bool:
        try:
            return grid_fits(analyse(kernel, joined=True), 128)
        except NotAContraction:
            return False

    def schedule(self, kernel: loop_ir.Kernel, target: Target, knobs: Mapping[str, Any]) -> tile_ir.TileKernel:
        return schedule_contraction(kernel, target, knobs)

    def estimate_cost(self, kernel: loop_ir.Kernel, target: Target) -> float:
        return estimate_contraction(kernel, target)

    def best_settings(self, kernel: loop_ir.Kernel, target: Target, count: int) -> list[Setting]:
        return best_contraction_settings(kernel, target, count)

    def lower(self, tile: tile_ir.TileKernel, target: Target) -> kernel_ir.Kernel:
        return lower_contraction(tile, target)


@hookimpl
def lamina_register_schedules(register):
    register(ContractionSchedule())
    register(UnrolledReductionSchedule())


@hookimpl
def lamina_register_fusion_rules(register):
    register(PairGatedProducts())
    register(JoinProductsOfOneInput())
    register(SplitContractionsAcrossBlocks())
    register(ReorderTmaOperandAxes())
    register(PadTmaOperandRows())
    register(StoreTmaOperandsKMajor())

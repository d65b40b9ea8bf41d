"""The contraction schedule's entry: the pinned knobs, the cost model's choice, the Tile IR."""

from __future__ import annotations

import math
from typing import Any, Mapping

from lamina.core.ir import loop_ir, tile_ir
from lamina.core.target import Target
from lamina.plugins.schedules.contraction import cost, tiling
from lamina.plugins.schedules.contraction.knobs import read_pinned
from lamina.plugins.schedules.contraction.recognise import analyse


def _where(kernel: loop_ir.Kernel) -> str:
    return f"kernel {kernel.name}, contraction schedule"


def schedule_contraction(kernel: loop_ir.Kernel, target: Target, knobs: Mapping[str, Any]) -> tile_ir.TileKernel:
    c = analyse(kernel)
    pinned = read_pinned(knobs, _where(kernel))
    choices, estimate, count = cost.choose(c, target, pinned, _where(kernel))
    pins = ", ".join(f"{k}={v}" for k, v in pinned.items()) or "none"
    notes = [
        ("chosen", f"{choices.summary()}; cheapest of {count} settings, pinned: {pins}"),
        ("estimate", estimate.text()),
    ]
    return tiling.tile_kernel(c, choices, target, notes)


def estimate_contraction(kernel: loop_ir.Kernel, target: Target) -> float:
    """Microseconds that the cheapest setting is expected to take (infinite where none can run)."""
    c = analyse(kernel)
    settings = cost.candidates(c, target)
    return min((cost.estimate(c, s, target).total_us for s in settings), default=math.inf)

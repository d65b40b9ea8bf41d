"""Float32 attention of many queries as one kernel: the ``attention_float32`` schedule's fusion rule.

Decomposed, a float32 ``scaled_dot_product_attention`` is the scores' product, their softmax
(by the time this rule runs, often one kernel that computes each score where it reads it:
``matmul_row_reduction``) and the probabilities times the values, the probabilities (queries x
keys x heads of floats) going through memory. This rule has the values' kernel compute the
softmax itself, as ``fuse_attention`` does for 16-bit attention on Hopper, where the
``attention_float32`` schedule takes the result.

It fires where the schedule's estimate for the fused kernel is below the estimates of the kernels
it replaces (each the cheapest of the schedules that take it, as the selection policy weighs them),
and wherever a knob of the schedule is pinned. Measured on an H100, one kernel gains at long
causal attention with 64 features and loses where the probabilities are few or the features many
(``experiments/float32_attention/RESULTS.md``).
"""

from __future__ import annotations

from typing import Any, Mapping

from lamina.core.errors import ScheduleError
from lamina.core.ir import loop_ir
from lamina.core.target import Target
from lamina.plugins.schedules.attention.decode.fuse import fuse_chains
from lamina.plugins.schedules.attention.float32 import tiling
from lamina.plugins.schedules.attention.float32.recognise import analyse
from lamina.plugins.schedules.contraction import estimate_contraction
from lamina.plugins.schedules.matmul_row_reduction import tiling as matmul_rows
from lamina.plugins.schedules.matmul_row_reduction.recognise import NotContractionRows, analyse as analyse_matmul_rows
from lamina.plugins.schedules.row_reduction.cost import estimate_cost as row_reduction_us
from lamina.plugins.schedules.row_reduction.recognise import NotARowReduction


class FuseFloat32Attention:
    name = "fuse_float32_attention"
    priority = 6
    """Beside ``fuse_attention`` and ``fuse_decode_attention``, which take 16-bit and few queries."""
    knob_namespace = tiling.SCHEDULE_NAME
    knob_names = tiling.KNOB_NAMES

    def apply(self, program: loop_ir.Program, target: Target, knobs: Mapping[str, Any]) -> loop_ir.Program | None:
        if target.compute_capability < tiling.MIN_ARCH:
            return None

        def takes(fused: loop_ir.Kernel, replaced: list[loop_ir.Kernel]) -> bool:
            _, fused_us, _ = tiling.choose(analyse(fused), target, knobs)
            return bool(knobs) or fused_us < sum(apart_us(kernel, target) for kernel in replaced)

        return fuse_chains(program, takes, scores_in_the_softmax=True)


def apart_us(kernel: loop_ir.Kernel, target: Target) -> float:
    """The cheapest estimate for one of the kernels the fused one replaces, among the schedules that
    take such kernels: a product, a softmax that computes its scores, a softmax of stored scores."""
    estimates = [estimate_contraction(kernel, target)]  # infinite where it is no product
    try:
        estimates.append(matmul_rows.choose(analyse_matmul_rows(kernel), target, {})[1].total_us)
    except (NotContractionRows, ScheduleError):
        pass
    try:
        estimates.append(row_reduction_us(kernel, target))
    except (NotARowReduction, ScheduleError):
        pass
    return min(estimates)


"""Float32 attention of many queries as one kernel: the ``attention_float32`` schedule's fusion rule.

Decomposed, a float32 ``scaled_dot_product_attention`` is the scores' product, their softmax
(by the time this rule runs, often one kernel that computes each score where it reads it:
``matmul_row_reduction``) and the probabilities times the values, the probabilities (queries x
keys x heads of floats) going through memory. This rule has the values' kernel compute the
softmax itself, as ``fuse_attention`` does for 16-bit attention on Hopper, where the
``attention_float32`` schedule takes the result and the cost model expects the one kernel to
take less than the kernels it replaces (or the schedule's knobs are pinned).
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from lamina.core.errors import ScheduleError
from lamina.core.ir import loop_ir
from lamina.core.target import Target
from lamina.plugins.fusion import analysis
from lamina.plugins.schedules.attention.decode.fuse import reduction_sum, sum_reading
from lamina.plugins.schedules.attention.float32 import tiling
from lamina.plugins.schedules.attention.float32.recognise import analyse
from lamina.plugins.schedules.attention.fuse_attention import values_reading_the_softmax
from lamina.plugins.schedules.attention.loops import NotAttention
from lamina.plugins.schedules.contraction import estimate_contraction
from lamina.plugins.schedules.matmul_row_reduction import tiling as row_products
from lamina.plugins.schedules.matmul_row_reduction import computed_where_read
from lamina.plugins.schedules.matmul_row_reduction.recognise import NotContractionRows
from lamina.plugins.schedules.matmul_row_reduction.recognise import analyse as analyse_row_products
from lamina.plugins.schedules.row_reduction.cost import estimate_cost as row_reduction_cost


def _apart_us(kernels: list[loop_ir.Kernel], target: Target) -> float:
    """The kernels' estimates as the schedules that would run them apart give them."""
    total = 0.0
    for kernel in kernels:
        try:
            total += row_products.choose(analyse_row_products(kernel), target, {})[1].total_us
            continue
        except (NotContractionRows, ScheduleError):
            pass
        estimate = estimate_contraction(kernel, target)
        total += estimate if estimate != float("inf") else row_reduction_cost(kernel, target)
    return total


class FuseFloat32Attention:
    name = "fuse_float32_attention"
    priority = 6
    """Beside ``fuse_attention`` and ``fuse_decode_attention``, which take 16-bit and few queries."""
    knob_namespace = tiling.SCHEDULE_NAME
    knob_names = tiling.KNOB_NAMES

    def apply(self, program: loop_ir.Program, target: Target, knobs: Mapping[str, Any]) -> loop_ir.Program | None:
        if target.compute_capability < tiling.MIN_ARCH:
            return None
        temporaries = {b.name for b in program.temporaries}
        known = analysis.buffers(program)
        kernels = list(program.kernels)
        writers, readers = analysis.writers_and_readers(kernels)

        def only_feeds(buffer: str, reader: int) -> int | None:
            """The kernel writing ``buffer`` where it is a temporary that kernel ``reader`` alone reads."""
            at = writers.get(buffer)
            if buffer not in temporaries or at is None or readers.get(buffer) != [reader]:
                return None
            return at if len(kernels[at].outputs) == 1 else None

        def softmaxes(softmax_at: int):
            """(the kernels it replaces, the softmax computing its scores) for the softmax kernel."""
            yield [softmax_at], kernels[softmax_at]
            for scores in analysis.loaded_buffers(kernels[softmax_at]):
                scores_at = only_feeds(scores, softmax_at)
                store = analysis.single_store(kernels[scores_at]) if scores_at is not None else None
                c = reduction_sum(kernels[scores_at]) if store is not None else None
                computed = computed_where_read(c, store, kernels[softmax_at]) if c is not None else None
                if computed is not None:
                    yield [scores_at, softmax_at], computed

        for position, values_kernel in enumerate(kernels):
            if reduction_sum(values_kernel) is None:
                continue
            for probabilities in analysis.loaded_buffers(values_kernel):
                softmax_at = only_feeds(probabilities, position)
                if softmax_at is None:
                    continue
                for replaced, softmax in softmaxes(softmax_at):
                    fused = values_reading_the_softmax(softmax, values_kernel, sum_reading(probabilities))
                    if fused is None:
                        continue
                    fused = analysis.renumbered(analysis.with_exact_inputs(fused, known))
                    try:
                        _, fused_us, _ = tiling.choose(analyse(fused), target, knobs)
                    except (NotAttention, ScheduleError):
                        continue
                    apart = [kernels[i] for i in (*replaced, position)]
                    if fused_us >= _apart_us(apart, target) and not knobs:
                        continue
                    dropped = {b.name for i in replaced for b in kernels[i].outputs}
                    kernels[position] = fused
                    for i in sorted(replaced, reverse=True):
                        del kernels[i]
                    return analysis.without_buffers(attrs.evolve(program, kernels=tuple(kernels)), dropped)
        return None

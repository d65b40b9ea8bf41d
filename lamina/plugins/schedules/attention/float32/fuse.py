"""Float32 attention of many queries as one kernel: the ``attention_float32`` schedule's fusion rule.

Decomposed, a float32 ``scaled_dot_product_attention`` is the scores' product, their softmax
(by the time this rule runs, often one kernel that computes each score where it reads it:
``matmul_row_reduction``) and the probabilities times the values, the probabilities (queries x
keys x heads of floats) going through memory. This rule has the values' kernel compute the
softmax itself, as ``fuse_attention`` does for 16-bit attention on Hopper, where the
``attention_float32`` schedule takes the result.

The rule fires only where a knob of the schedule is pinned (``attention_float32.block_queries =
64`` in the configuration, ``LAMINA_KNOB_ATTENTION_FLOAT32__BLOCK_QUERIES=64``): the kernel has
run on the simulator and compiled for sm_90a, but has not yet been timed or run on a GPU
against the kernels it replaces (``experiments/float32_attention/time_attention.py`` times it and
``fit.py`` fits the cost model to that), so that no float32 program runs it unasked.
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
from lamina.plugins.schedules.matmul_row_reduction import computed_where_read


class FuseFloat32Attention:
    name = "fuse_float32_attention"
    priority = 6
    """Beside ``fuse_attention`` and ``fuse_decode_attention``, which take 16-bit and few queries."""
    knob_namespace = tiling.SCHEDULE_NAME
    knob_names = tiling.KNOB_NAMES

    def apply(self, program: loop_ir.Program, target: Target, knobs: Mapping[str, Any]) -> loop_ir.Program | None:
        if target.compute_capability < tiling.MIN_ARCH or not knobs:
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
                        tiling.choose(analyse(fused), target, knobs)
                    except (NotAttention, ScheduleError):
                        continue
                    dropped = {b.name for i in replaced for b in kernels[i].outputs}
                    kernels[position] = fused
                    for i in sorted(replaced, reverse=True):
                        del kernels[i]
                    return analysis.without_buffers(attrs.evolve(program, kernels=tuple(kernels)), dropped)
        return None

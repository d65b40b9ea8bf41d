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

from lamina.core.ir import loop_ir
from lamina.core.target import Target
from lamina.plugins.schedules.attention.decode.fuse import fuse_first_chain
from lamina.plugins.schedules.attention.float32 import tiling
from lamina.plugins.schedules.attention.float32.recognise import analyse


class FuseFloat32Attention:
    name = "fuse_float32_attention"
    priority = 6
    """Beside ``fuse_attention`` and ``fuse_decode_attention``, which take 16-bit and few queries."""
    knob_namespace = tiling.SCHEDULE_NAME
    knob_names = tiling.KNOB_NAMES

    def apply(self, program: loop_ir.Program, target: Target, knobs: Mapping[str, Any]) -> loop_ir.Program | None:
        if target.compute_capability < tiling.MIN_ARCH or not knobs:
            return None
        return fuse_first_chain(program, lambda fused: tiling.choose(analyse(fused), target, knobs),
                                scores_in_the_softmax=True)

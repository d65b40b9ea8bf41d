"""Rows of a 16-bit temporary padded to a multiple of 16 bytes, so that the TMA can read them.

The TMA copies boxes of a tensor whose rows lie a multiple of 16 bytes apart
(``operands.view``). Attention's probabilities over Whisper's 1 500 audio frames or ViT's 197
patches are rows of 3 000 and 394 bytes, so the product that sums them with the values would run
on the CUDA cores, at a twentieth of the TMA GEMM's rate. Where such an operand is a temporary of
the program read along its last axis, this rule rounds that axis of its buffer up to 16 bytes:
every kernel indexes the buffer as before, so the writer stores each row where it did and no
kernel touches the elements past a row's end, while the TMA reads the rows at their padded stride
and fills the columns past the reduction's end with zeros. A K-major copy of the other operand
(``k_major_operands``) is padded the same way.
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from lamina.core.ir import expr as ex, loop_ir
from lamina.core.target import Target
from lamina.plugins.fusion import analysis
from lamina.plugins.schedules.contraction.knobs import FORMER_KNOB_NAMES, KNOB_NAMES, PIPELINE_KNOB_NAMES
from lamina.plugins.schedules.contraction.recognise import Contraction, Operand, analyse, contractions
from lamina.plugins.schedules.contraction.schedule import estimate_contraction
from lamina.plugins.schedules.contraction.wgmma_tma import operands
from lamina.plugins.schedules.contraction.wgmma_tma.k_major_operands import copied_k_major
from lamina.plugins.schedules.contraction.wgmma_tma.operands import padded_shape, with_buffer, with_buffer_in_kernel
from lamina.plugins.schedules.contraction.wgmma_tma.setting import ARCH, MIN_UNPINNED_ROWS, pinned_by
from lamina.plugins.schedules.pointwise import PointwiseSchedule

POINTWISE = PointwiseSchedule()


class PadTmaOperandRows:
    """Pads an operand's rows where the cost model expects the product to gain by it, or wherever
    the TMA GEMM is pinned (``products = wgmma_tma``, or one of its own knobs)."""

    name = "pad_tma_operand_rows"
    priority = 8
    """Before ``store_tma_operands_k_major`` (7), which copies the other operand once this one
    is readable, and before split-K (5) weighs the product on the TMA GEMM."""
    knob_namespace = "contraction"
    knob_names = (*KNOB_NAMES, *PIPELINE_KNOB_NAMES)
    former_knob_names = FORMER_KNOB_NAMES

    def apply(self, program: loop_ir.Program, target: Target, knobs: Mapping[str, Any]) -> loop_ir.Program | None:
        if target.compute_capability != ARCH:
            return None
        temporaries = {b.name: b for b in program.temporaries}
        taken = set(analysis.buffers(program)) | {k.name for k in program.kernels}
        pinned = pinned_by(knobs)
        for _, c in contractions(program):
            padded = _padded_operand(c, temporaries)
            if padded is not None and (pinned or _pays(c, with_buffer_in_kernel(c.kernel, padded), target, taken)):
                return with_buffer(program, padded)
        return None


def _padded_operand(c: Contraction, temporaries: dict[str, loop_ir.Buffer]) -> loop_ir.Buffer | None:
    """The buffer of a 16-bit operand of ``c`` that the TMA cannot read only because its rows are
    not 16 bytes apart, padded; None where there is none."""
    factors = operands.factors(c)
    if factors is None or c.hinted().extents[c.m] < MIN_UNPINNED_ROWS:
        return None
    for operand in factors:
        buffer = temporaries.get(operand.load.buffer)
        if buffer is None or not _read_along_its_last_axis(c, operand) or not isinstance(operands.view(c, operand), str):
            continue
        padded = attrs.evolve(buffer, type=padded_shape(buffer.type))
        if padded.type == buffer.type:
            continue
        rewritten = analyse(with_buffer_in_kernel(c.kernel, padded))
        (same,) = [o for o in rewritten.operands if o.load == operand.load]
        if not isinstance(operands.view(rewritten, same), str):
            return padded
    return None


def _pays(c: Contraction, padded: loop_ir.Kernel, target: Target, taken: set[str]) -> bool:
    """Whether the cost model expects the product over the padded operand, with the K-major copy of
    the other operand where that needs one, to run faster than the product as it is: over ViT's
    197 patches the copy costs about what the TMA GEMM saves, over Whisper's 1 500 frames a
    tenth of it."""
    copied = copied_k_major(analyse(padded), taken)
    if copied is None:
        return estimate_contraction(padded, target) < estimate_contraction(c.kernel, target)
    copy, reading = copied
    return estimate_contraction(reading, target) + POINTWISE.estimate_cost(copy, target) \
        < estimate_contraction(c.kernel, target)


def _read_along_its_last_axis(c: Contraction, operand: Operand) -> bool:
    return operand.load.index[-1] == ex.Var(c.reduce_var)

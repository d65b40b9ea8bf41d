"""Store a temporary whose every value is widened from a narrower float dtype in that dtype.

A kernel that stores bfloat16 values widened to float32 (attention's query, rotated in
bfloat16 and widened for its product; its probabilities, rounded to bfloat16 for the second
product; a convolution's input padded with zeros) holds no more than bfloat16 can: stored in
bfloat16 and widened by each reader, the values are the same and the bytes half. It runs before the other rules, so that they see a
matmul reading two 16-bit operands, as the tensor cores want (``inline_pointwise_producers``
keeps such an operand stored on Hopper, and ``fuse_contraction_into_row_reduction`` leaves
its product to the TMA GEMM).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from lamina.core.ir import expr as ex, loop_ir
from lamina.core.ir.dtypes import DType
from lamina.core.target import Target
from lamina.plugins.fusion.store_narrowed_temporaries import buffer_users, narrow_temporary


class StoreWidenedTemporariesNarrow:
    name = "store_widened_temporaries_narrow"
    priority = 300

    def apply(self, program: loop_ir.Program, target: Target, knobs: Mapping[str, Any]) -> loop_ir.Program | None:
        """Narrow every temporary that qualifies, in one pass (a model has some per layer, and the
        pass runs after every other rule's change: it reads each kernel once)."""
        sources = _widened_sources(program)
        result = program
        users = None
        for buffer in program.temporaries:
            source = sources.get(buffer.name)
            if source is not None and source.is_float and buffer.type.dtype.is_float \
                    and source.itemsize < buffer.type.dtype.itemsize:
                users = users or buffer_users(program)
                result = narrow_temporary(result, buffer, source, widen_reads=True, users=users[buffer.name])
        return None if result is program else result


def _widened_sources(program: loop_ir.Program) -> dict[str, DType | None]:
    """For each buffer a kernel stores, the one dtype every stored value is a cast from, or None
    where a value is no cast or the casts are from several dtypes."""
    found: dict[str, DType | None] = {}
    for kernel in program.kernels:
        for s in loop_ir.statements(kernel.body):
            if not isinstance(s, loop_ir.Store):
                continue
            source = _widened_from(s.value)
            if s.buffer not in found:
                found[s.buffer] = source
            elif found[s.buffer] != source:
                found[s.buffer] = None
    return found


EXACT_IN_EVERY_FLOAT = 256
"""Whole numbers up to this size, zero and the infinities are exact in bf16 and fp16 alike."""


def _widened_from(value: ex.Expr) -> DType | None:
    """The dtype ``value`` is a cast from, where every value it takes is one: a cast, or a
    ``where`` choosing between such casts and constants every float dtype holds exactly (a
    convolution's input padded with zeros); None otherwise."""
    if isinstance(value, ex.Op) and value.op == "cast":
        return value.args[0].dtype
    if isinstance(value, ex.Op) and value.op == "where":
        sources = {_widened_from(v) for v in value.args[1:] if not _exact_constant(v)}
        if len(sources) == 1:
            return sources.pop()
    return None


def _exact_constant(value: ex.Expr) -> bool:
    if not isinstance(value, ex.Const):
        return False
    v = float(value.value)
    return math.isinf(v) or (math.isfinite(v) and v == int(v) and abs(v) <= EXACT_IN_EVERY_FLOAT)

"""Store a temporary whose every value is widened from a narrower float dtype in that dtype.

A kernel that stores bfloat16 values widened to float32 (attention's query, rotated in
bfloat16 and widened for its product; its probabilities, rounded to bfloat16 for the second
product) holds no more than bfloat16 can: stored in bfloat16 and widened by each reader, the
values are the same and the bytes half. It runs before the other rules, so that they see a
matmul reading two 16-bit operands, as the tensor cores want (``inline_pointwise_producers``
keeps such an operand stored on Hopper, and ``fuse_contraction_into_row_reduction`` leaves
its product to the TMA GEMM).
"""

from __future__ import annotations

from typing import Any, Mapping

from lamina.core.ir import expr as ex, loop_ir
from lamina.core.ir.dtypes import DType
from lamina.core.target import Target
from lamina.plugins.fusion.store_narrowed_temporaries import narrow_temporary


class StoreWidenedTemporariesNarrow:
    name = "store_widened_temporaries_narrow"
    priority = 300

    def apply(self, program: loop_ir.Program, target: Target, knobs: Mapping[str, Any]) -> loop_ir.Program | None:
        """Narrow every temporary that qualifies, in one pass."""
        result = program
        for buffer in program.temporaries:
            source = _common_widened_source(result, buffer)
            if source is not None:
                result = narrow_temporary(result, buffer, source, widen_reads=True)
        return None if result is program else result


def _common_widened_source(program: loop_ir.Program, buffer: loop_ir.Buffer) -> DType | None:
    """The narrower float dtype that every value stored in ``buffer`` is widened from, if one is."""
    sources: set[DType] = set()
    for kernel in program.kernels:
        if any(b.name == buffer.name for b in kernel.outputs):
            for s in loop_ir.statements(kernel.body):
                if isinstance(s, loop_ir.Store) and s.buffer == buffer.name:
                    value = s.value
                    if not (isinstance(value, ex.Op) and value.op == "cast"):
                        return None
                    sources.add(value.args[0].dtype)
    if len(sources) != 1:
        return None
    (source,) = sources
    wide = buffer.type.dtype
    return source if source.is_float and wide.is_float and source.itemsize < wide.itemsize else None

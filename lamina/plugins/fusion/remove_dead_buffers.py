"""Remove temporaries that nothing reads, and the kernels that only write them.

Other rules leave such buffers behind (an inlined producer's last reader may have
gone too); removing them also trims every kernel's inputs to the buffers it
actually loads. Program outputs are never removed.
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from lamina.core.ir import loop_ir
from lamina.core.target import Target
from lamina.plugins.fusion import analysis


class RemoveDeadBuffers:
    name = "remove_dead_buffers"
    priority = 0

    def apply(self, program: loop_ir.Program, target: Target, knobs: Mapping[str, Any]) -> loop_ir.Program | None:
        known = analysis.buffers(program)
        outputs = {b.name for b in program.outputs}
        kernels = [analysis.with_exact_inputs(k, known) for k in program.kernels]
        while True:
            read = {name for k in kernels for name in analysis.loaded_buffers(k)}
            live = read | outputs
            kept = [k for k in kernels if any(b.name in live for b in k.outputs)]
            if len(kept) == len(kernels):
                break
            kernels = kept
        written = {b.name for k in kernels for b in k.outputs}
        temporaries = tuple(b for b in program.temporaries if b.name in read or b.name in written)
        result = attrs.evolve(program, kernels=tuple(kernels), temporaries=temporaries)
        return None if result == program else result

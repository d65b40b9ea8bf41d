"""Tensor-core multiply-adds (``MmaTf32``, ``Mma16``) in the Kernel IR simulator.

Every lane evaluates its operands in lockstep; each warp's pieces are then assembled into
its A (16 x 8), B (8 x 8) and D (16 x 8) as PTX lays out m16n8k8 (A 16 x 16 and B 16 x 8 for
m16n8k16), the product is added in float64 and rounded once to float32 (the tensor cores' own
order of additions is not specified), and each lane gets its four accumulators back. For
m16n8k8 the operands' low 13 bits are dropped first, as the tensor cores read only the tf32
part of a float32; m16n8k16's operands are 32-bit words of two 16-bit values, unpacked.
"""

from __future__ import annotations

from typing import Callable

import torch

from lamina.backends.reference.simulator.expressions import ExpressionCompiler
from lamina.backends.reference.simulator.grid import WARP_SIZE, Mask, ThreadGrid
from lamina.backends.reference.simulator.memory import RegisterArray, per_thread
from lamina.backends.reference.scalar_ops import torch_dtype
from lamina.backends.reference.tf32 import truncated
from lamina.core.errors import SimulationError, VerificationError
from lamina.core.ir import dtypes, kernel_ir
from lamina.core.ir.dtypes import DType

Runner = Callable[[Mask], None]


def _lane_layout() -> tuple[torch.Tensor, torch.Tensor]:
    """Each lane's group (``lane // 4``) and its place in the group (``lane % 4``)."""
    lane = torch.arange(WARP_SIZE)
    return lane // 4, lane % 4


class MmaRunner:
    """Builds the runner of one ``MmaTf32`` or ``Mma16`` statement."""

    def __init__(self, kernel: str, grid: ThreadGrid, exprs: ExpressionCompiler, memories: dict, sites):
        self.kernel, self.grid, self.exprs, self.memories, self.sites = kernel, grid, exprs, memories, sites

    def build(self, s: kernel_ir.MmaTf32 | kernel_ir.Mma16, scope: dict[str, DType]) -> Runner:
        memory = self.memories.get(s.acc)
        if not isinstance(memory, RegisterArray) or memory.dtype != dtypes.float32:
            raise VerificationError(f"kernel {self.kernel}: mma accumulates into {s.acc}, which is not an f32 "
                                    "register array")
        if self.grid.threads_per_block % WARP_SIZE:
            raise SimulationError(f"kernel {self.kernel}: mma in blocks of {self.grid.threads_per_block} threads; "
                                  f"a warp-wide mma needs blocks of whole warps")
        places = [[self.exprs.compile(i, scope) for i in place] for place in s.acc_index]
        a_of = [self.exprs.compile(v, scope) for v in s.a]
        b_of = [self.exprs.compile(v, scope) for v in s.b]
        site, grid, text = next(self.sites), self.grid, kernel_ir.format_body((s,), "")[0]
        total, warps = grid.total, grid.total // WARP_SIZE
        group, quad = _lane_layout()

        sixteen_bit = isinstance(s, kernel_ir.Mma16)
        k = 16 if sixteen_bit else 8

        def pieces(evaluators, mask) -> torch.Tensor:
            """[warps, lanes, values]: each lane's operand values in order (a word's low half first)."""
            if sixteen_bit:
                words = [per_thread(torch.as_tensor(f(mask), dtype=torch.int32), total) for f in evaluators]
                halves = torch.stack(words, 1).contiguous().view(torch_dtype(s.operand_dtype))
                return halves.view(warps, WARP_SIZE, 2 * len(evaluators)).double()
            values = [per_thread(torch.as_tensor(f(mask), dtype=torch.float32), total) for f in evaluators]
            return truncated(torch.stack(values, 1)).view(warps, WARP_SIZE, len(evaluators)).double()

        def run(mask: Mask) -> None:
            if not mask.full:
                running = mask.active.view(warps, WARP_SIZE)
                partial = running.any(1) & ~running.all(1)
                if bool(partial.any()):
                    thread = int(partial.nonzero()[0]) * WARP_SIZE
                    raise SimulationError(f"kernel {self.kernel}: `{text}` runs in only part of the warp of "
                                          f"{grid.describe_thread(thread)}; every lane of a warp must run an mma")
            a, b = pieces(a_of, mask), pieces(b_of, mask)
            indices = [[f(mask) for f in place] for place in places]
            acc = torch.stack([memory.read(i, mask, site) for i in indices], 1).view(warps, WARP_SIZE, 4).double()
            matrix_a = torch.zeros(warps, 16, k, dtype=torch.float64)
            matrix_b = torch.zeros(warps, k, 8, dtype=torch.float64)
            matrix_d = torch.zeros(warps, 16, 8, dtype=torch.float64)
            for i in range(4):
                matrix_d[:, group + 8 * (i // 2), 2 * quad + i % 2] = acc[:, :, i]
                if sixteen_bit:  # word i: row g + 8 (i % 2), columns 2t + 8 (i // 2) and the next
                    for half in range(2):
                        matrix_a[:, group + 8 * (i % 2), 2 * quad + 8 * (i // 2) + half] = a[:, :, 2 * i + half]
                else:
                    matrix_a[:, group + 8 * (i % 2), quad + 4 * (i // 2)] = a[:, :, i]
            for i in range(2):
                if sixteen_bit:  # word i: rows 2t + 8 i and the next, column g
                    for half in range(2):
                        matrix_b[:, 2 * quad + 8 * i + half, group] = b[:, :, 2 * i + half]
                else:
                    matrix_b[:, quad + 4 * i, group] = b[:, :, i]
            matrix_d += matrix_a @ matrix_b
            for i, index in enumerate(indices):
                value = matrix_d[:, group + 8 * (i // 2), 2 * quad + i % 2].reshape(total).float()
                memory.write(index, value, mask, site)

        return run

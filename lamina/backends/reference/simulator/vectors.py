"""Vector loads and stores in the Kernel IR simulator.

A vector access copies ``width`` adjacent elements between a global parameter or a shared
array and a register array, element by element, after checking what
the GPU would fault on: the whole vector within bounds, and both its offset in memory
and its place in the register array aligned to ``width`` elements (its size in bytes).
A running thread whose access is out of bounds or misaligned is reported and makes no
access. A shared access counts its bank conflicts as one wide access (``SharedArray.read_vector``,
``SharedArray.write_vector``).
"""

from __future__ import annotations

from typing import Callable

import torch

from lamina.backends.reference.simulator.expressions import ExpressionCompiler
from lamina.backends.reference.simulator.grid import Mask, ThreadGrid
from lamina.backends.reference.simulator.memory import (
    GlobalArray,
    RegisterArray,
    as_index,
    linear_index,
    out_of_bounds,
    per_thread,
)
from lamina.backends.reference.simulator.report import MISALIGNED, OUT_OF_BOUNDS, FaultLog
from lamina.backends.reference.simulator.shared import SharedArray
from lamina.core.errors import VerificationError
from lamina.core.ir import kernel_ir
from lamina.core.ir.dtypes import DType

Runner = Callable[[Mask], None]


class VectorAccesses:
    """Builds the runners of a kernel's vector loads and stores."""

    def __init__(self, kernel: str, grid: ThreadGrid, faults: FaultLog, exprs: ExpressionCompiler, sites):
        self.kernel = kernel
        self.grid = grid
        self.faults = faults
        self.exprs = exprs
        self.sites = sites

    def load(self, s: kernel_ir.VectorLoad, scope: dict[str, DType]) -> Runner:
        if isinstance(self.exprs.memory(s.src, len(s.src_index), "vector load"), SharedArray):
            return self._shared_load(s, scope)
        memory, register, offset_of, register_of = self._operands(s, s.src, s.src_index, s.dst, s.dst_index, scope)
        width, site = s.width, next(self.sites)

        def run(mask: Mask) -> None:
            offset, place = offset_of(mask), [f(mask) for f in register_of]
            valid = self._checked(s, memory, offset, register, place, mask, site)
            if not valid.any():
                return
            values = memory.read([offset], valid, site, width)
            for lane in range(width):
                register.write(_lane(place, lane), values[:, lane], valid, site)

        return run

    def _shared_load(self, s: kernel_ir.VectorLoad, scope: dict[str, DType]) -> Runner:
        memory, register, indices_of, register_of = self._operands(s, s.src, s.src_index, s.dst, s.dst_index, scope)
        width, site = s.width, next(self.sites)

        def run(mask: Mask) -> None:
            place = [f(mask) for f in register_of]
            mask = self._register_aligned(s, register, place, mask, site)
            if not mask.any():
                return
            values, loaded = memory.read_vector([f(mask) for f in indices_of], mask, site, width)
            if not loaded.any():
                return
            for lane in range(width):
                register.write(_lane(place, lane), values[:, lane], loaded, site)

        return run

    def store(self, s: kernel_ir.VectorStore, scope: dict[str, DType]) -> Runner:
        if isinstance(self.exprs.memory(s.dst, len(s.dst_index), "vector store"), SharedArray):
            return self._shared_store(s, scope)
        memory, register, offset_of, register_of = self._operands(s, s.dst, s.dst_index, s.src, s.src_index, scope)
        if not memory.writable:
            raise VerificationError(f"kernel {self.kernel}: vector store to input parameter {s.dst}; "
                                    "only writable parameters may be stored to")
        width, site = s.width, next(self.sites)

        def run(mask: Mask) -> None:
            offset, place = offset_of(mask), [f(mask) for f in register_of]
            valid = self._checked(s, memory, offset, register, place, mask, site)
            if not valid.any():
                return
            for lane in range(width):
                value = register.read(_lane(place, lane), valid, site)
                memory.write([as_index(offset) + lane], value, valid, site)

        return run

    def _shared_store(self, s: kernel_ir.VectorStore, scope: dict[str, DType]) -> Runner:
        memory, register, indices_of, register_of = self._operands(s, s.dst, s.dst_index, s.src, s.src_index, scope)
        width, site = s.width, next(self.sites)

        def run(mask: Mask) -> None:
            place = [f(mask) for f in register_of]
            mask = self._register_aligned(s, register, place, mask, site)
            if not mask.any():
                return
            values = torch.stack([register.read(_lane(place, lane), mask, site) for lane in range(width)], 1)
            memory.write_vector([f(mask) for f in indices_of], values, mask, site)

        return run

    def _operands(self, s, memory_name, memory_index, register_name, register_index, scope):
        kind = _kind(s)
        memory = self.exprs.memory(memory_name, len(memory_index), kind)
        register = self.exprs.memory(register_name, len(register_index), kind)
        shared = isinstance(memory, SharedArray)
        if not isinstance(memory, GlobalArray) and not shared:
            raise VerificationError(f"kernel {self.kernel}: {kind} of {memory_name}, which is not a global parameter "
                                    "or a shared array")
        if not isinstance(register, RegisterArray):
            raise VerificationError(f"kernel {self.kernel}: {kind} through {register_name}, "
                                    "which is not a register array")
        if memory.dtype != register.dtype:
            raise VerificationError(f"kernel {self.kernel}: {kind} between {memory.dtype} {memory_name} and "
                                    f"{register.dtype} {register_name}; the types must match")
        if s.width < 2 or s.width * memory.dtype.itemsize not in kernel_ir.VECTOR_BYTES:
            raise VerificationError(f"kernel {self.kernel}: {kind} of {s.width} {memory.dtype} elements; a vector "
                                    f"access moves {', '.join(map(str, kernel_ir.VECTOR_BYTES))} bytes")
        memory_of = [self.exprs.compile(i, scope) for i in memory_index]
        register_of = [self.exprs.compile(i, scope) for i in register_index]
        return memory, register, memory_of if shared else memory_of[0], register_of

    def _checked(self, s, memory: GlobalArray, offset: torch.Tensor, register: RegisterArray,
                 place: list[torch.Tensor], mask: Mask, site: int) -> Mask:
        """The running threads whose access is in bounds and aligned; the others are reported."""
        kind, width, grid, total = _kind(s), s.width, self.grid, self.grid.total
        offset = per_thread(as_index(offset), total)
        nbytes = width * memory.dtype.itemsize
        bad = out_of_bounds([offset], (memory.numel,), mask, width)
        if bad is not None and self.faults.add(OUT_OF_BOUNDS, (site, "global"), bad, lambda t: (
                f"{kind} of {width} elements of {memory.name} at offset {int(offset[t])}, outside "
                f"[0, {memory.numel}), by {grid.describe_thread(t)}")):
            mask = Mask(mask.active & ~bad)
        misaligned = (offset % width != 0) & mask.active
        if self.faults.add(MISALIGNED, (site, "global"), misaligned, lambda t: (
                f"{kind} of {nbytes} B of {memory.name} at byte {int(offset[t]) * memory.dtype.itemsize} "
                f"is not {nbytes}-byte aligned, by {grid.describe_thread(t)}")):
            mask = Mask(mask.active & ~misaligned)
        return self._register_aligned(s, register, place, mask, site)

    def _register_aligned(self, s, register: RegisterArray, place: list[torch.Tensor], mask: Mask, site) -> Mask:
        """The running threads whose place in the register array is aligned; the others are reported."""
        kind, width, grid = _kind(s), s.width, self.grid
        nbytes = width * register.dtype.itemsize
        flat = per_thread(linear_index(place, register.shape), grid.total)
        misaligned = (flat % width != 0) & mask.active
        if self.faults.add(MISALIGNED, (site, "register"), misaligned, lambda t: (
                f"{kind} of {nbytes} B through register array {register.name} at element {int(flat[t])} "
                f"is not {nbytes}-byte aligned, by {grid.describe_thread(t)}")):
            mask = Mask(mask.active & ~misaligned)
        return mask


def _kind(s) -> str:
    return "vector load" if isinstance(s, kernel_ir.VectorLoad) else "vector store"


def _lane(place: list[torch.Tensor], lane: int) -> list[torch.Tensor]:
    """The register indices of element ``lane`` of a vector that starts at ``place``."""
    return place[:-1] + [as_index(place[-1]) + lane]


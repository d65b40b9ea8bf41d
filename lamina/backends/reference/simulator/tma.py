"""Hopper's TMA copies (``TmaLoad``) in the Kernel IR simulator.

Each running thread issues one copy of the box at its coordinates: the box's elements inside
the tensor are read from the global parameter, the others are zeros (PTX ISA, "Tensor Access
Modes: Bounding Box", out-of-bound elements filled with zeros), and the box lands in the shared
array at once, its logical indices where the GPU places it in the swizzle (the simulator keeps
indices logical, as wgmma reads them). Its bytes, the whole box's, then complete on the copy's
mbarrier, and every element remembers the barrier and the phase it belongs to: a thread that
reads it before it has seen that phase complete (``MbarrierWait``) races with the copy, which
on the GPU may not have landed. A copy that lands where a pending wgmma still reads is a race
too (the stage was released before the wgmma was waited for).
"""

from __future__ import annotations

import torch

from lamina.backends.reference.simulator.grid import Mask, ThreadGrid
from lamina.backends.reference.simulator.mbarriers import Mbarriers
from lamina.backends.reference.simulator.memory import GlobalArray, as_index, per_thread
from lamina.backends.reference.simulator.report import MISALIGNED, OUT_OF_BOUNDS, RACES, FaultLog
from lamina.backends.reference.simulator.shared import Lanes, SharedArray
from lamina.core.errors import VerificationError
from lamina.core.ir import kernel_ir

_DESTINATION_ALIGNMENT = 128
"""The bytes a TMA destination in shared memory is aligned to (1024 for the 128-byte swizzle's pattern)."""


class TmaCopies:
    def __init__(self, kernel: kernel_ir.Kernel, grid: ThreadGrid, faults: FaultLog, exprs, memories: dict, sites,
                 barriers: Mbarriers):
        self.kernel, self.grid, self.faults, self.exprs, self.memories = kernel, grid, faults, exprs, memories
        self.sites, self.barriers = sites, barriers
        self.tags: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        """Per shared array that copies write: per element, the barrier slot (-1 for none) and the phase."""

    def build(self, s: kernel_ir.TmaLoad, scope):
        try:
            m = self.kernel.tensor_map(s.tensor_map)
        except KeyError:
            raise VerificationError(f"kernel {self.kernel.name}: tma load through unknown tensor map "
                                    f"{s.tensor_map}") from None
        dst, src = self.memories.get(s.dst), self.memories.get(m.param)
        if not isinstance(dst, SharedArray) or not isinstance(src, GlobalArray) or dst.dtype != src.dtype:
            raise VerificationError(f"kernel {self.kernel.name}: tma load of {m.param} into {s.dst}: it copies a "
                                    "global parameter into a shared array of its type")
        self._watch(dst)
        site = next(self.sites)
        dst_of = [self.exprs.compile(i, scope) for i in s.dst_index]
        row_of, column_of = self.exprs.compile(s.row, scope), self.exprs.compile(s.column, scope)
        slots_of = self.barriers.slots(s.barrier, s.barrier_index, scope, site)
        rows, columns = torch.arange(m.box[0]).unsqueeze(1), torch.arange(m.box[1]).unsqueeze(0)
        box_bytes = m.box[0] * m.box[1] * dst.itemsize
        text = kernel_ir.format_body((s,), "")[0]

        def run(mask: Mask) -> None:
            threads, slots, _ = slots_of(mask)
            total = self.grid.total
            at = [per_thread(as_index(f(mask)), total) for f in dst_of]
            row, column = (per_thread(as_index(f(mask)), total) for f in (row_of, column_of))
            for thread, slot in zip(threads.tolist(), slots.tolist()):
                global_rows, global_columns = int(row[thread]) + rows, int(column[thread]) + columns
                inside = ((global_rows >= 0) & (global_rows < m.shape[0])
                          & (global_columns >= 0) & (global_columns < m.shape[1]))
                offsets = torch.where(inside, global_rows * m.row_stride + global_columns, 0).reshape(-1)
                values = torch.where(inside.reshape(-1), src.data.index_select(0, offsets),
                                     torch.zeros((), dtype=src.data.dtype))
                lanes = self._destination(dst, [int(i[thread]) for i in at], m.box, thread, site, text)
                if lanes is None:
                    continue
                self._land(dst, lanes, values, slot, site)
                barrier_slots, phases = self.tags[dst.name]
                barrier_slots.index_fill_(0, lanes.elements, slot)
                phases.index_fill_(0, lanes.elements, int(self.barriers.phase[slot]))
                self.barriers.complete_transaction(slot, box_bytes)

        return run

    def _watch(self, array: SharedArray) -> None:
        if array.name not in self.tags:
            size = array.data.numel()
            self.tags[array.name] = (torch.full((size,), -1), torch.zeros(size, dtype=torch.int64))
            array.tma = self

    def _destination(self, dst: SharedArray, index: list[int], box, thread: int, site: int, text: str) -> Lanes | None:
        """The lanes of the box's elements in ``dst`` (one per element, for the issuing thread); None if it does not fit."""
        *leading, row, column = index
        shape = dst.shape
        describe = self.grid.describe_thread(thread)
        fits = all(0 <= i < n for i, n in zip(leading, shape[:-2])) and 0 <= row and row + box[0] <= shape[-2] \
            and 0 <= column and column + box[1] <= shape[-1]
        one = torch.ones(1, dtype=torch.bool)
        if not fits:
            self.faults.add(OUT_OF_BOUNDS, (site,), one, lambda _: (
                f"`{text}` by {describe} writes a [{box[0]}][{box[1]}] box into {dst.name} at {index}, outside "
                f"{list(shape)}"))
            return None
        start = 0
        for i, n in zip(index, shape):
            start = start * n + i
        alignment = 1024 if dst.swizzled is not None else _DESTINATION_ALIGNMENT
        if (start * dst.itemsize) % alignment:
            self.faults.add(MISALIGNED, (site,), one, lambda _: (
                f"`{text}` by {describe} writes {dst.name} from byte {start * dst.itemsize}, not {alignment}-byte "
                "aligned"))
            return None
        rows, columns = torch.arange(box[0]).unsqueeze(1), torch.arange(box[1]).unsqueeze(0)
        flat = (start + rows * shape[-1] + columns).reshape(-1)
        block = int(self.grid.block_id[thread])
        local = int(self.grid.local_id[thread])
        count = flat.numel()
        return Lanes(torch.full((count,), thread), torch.full((count,), local), flat,
                     block * dst.numel + flat, False)

    def _land(self, dst: SharedArray, lanes: Lanes, values: torch.Tensor, slot: int, site: int) -> None:
        """The box lands through the async proxy: no pending wgmma may still read there."""
        if dst.async_proxy is not None:
            dst.async_proxy.overwriting(dst, lanes, site, "written by a TMA copy")
            dst.async_proxy.unfenced[dst.name].index_fill_(0, lanes.elements, -1)
        dst.data.index_copy_(0, lanes.elements, values)
        dst.written.index_fill_(0, lanes.elements, True)

    def check_read(self, array: SharedArray, lanes: Lanes, site: int) -> None:
        """(``SharedArray.tma``) a read of what a copy wrote needs a wait on the copy's phase by the reader."""
        barrier_slots, phases = self.tags[array.name]
        slots = barrier_slots.index_select(0, lanes.elements)
        copied = slots >= 0
        if not bool(copied.any()):
            return
        seen = torch.zeros_like(slots)
        seen[copied] = self.barriers.phase_seen(lanes.threads[copied], slots[copied])
        phase = phases.index_select(0, lanes.elements)
        early = copied & (seen <= phase)
        self.faults.add(RACES, (site, "tma"), early, lambda i: (
            f"read of {array.describe_element(lanes, i)} by {self.grid.describe_thread(int(lanes.threads[i]))}, which a "
            f"TMA copy wrote completing phase {int(phase[i])} of {self.barriers.describe(int(slots[i]))}, before the "
            f"thread saw that phase complete (it saw {int(seen[i])} phases): wait on the barrier (MbarrierWait) first"))

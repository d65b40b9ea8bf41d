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

A multicast copy (``TmaLoad.multicast``) lands as one in each listed block of the issuing
thread's cluster, at the same place of that block's array, and completes on that block's own
barrier, each landing checked as a copy into that block. Another block's copy may land only
once that block has told the copying thread it no longer reads there: every read of the array
is timed, and a landing where the block read after the last news the copying thread had of it
(a ``ClusterBarrier``, or a wait on a phase that block arrived in) is a race, the block having
released the stage late or not at all. The news is timed by block, not by thread: an arrival
by one thread vouches for the reads its block made before it.

A ``TmaStore`` reads its box from shared memory at once and writes the box's elements that lie
inside the tensor; their reads are checked as any read and, as the TMA reads through the async
proxy, against writes that no ``AsyncProxyFence`` covers (what the box holds past the tensor's
edges is never written anywhere, so a block need not fill it). A box that starts before the tensor (a negative
coordinate, which a load may have) stops the kernel on the GPU, and is a fault here. Its
reads stay pending until a ``TmaStoreWait`` covers its group (``TmaStoreCommit``): a write there before is a race, and a kernel that
ends with a store pending is a fault.
"""

from __future__ import annotations

import torch

from lamina.backends.reference.simulator.grid import Mask, ThreadGrid
from lamina.backends.reference.simulator.mbarriers import Mbarriers
from lamina.backends.reference.simulator.memory import GlobalArray, as_index, per_thread
from lamina.backends.reference.simulator.report import ASYNC_PROTOCOL, MISALIGNED, OUT_OF_BOUNDS, RACES, FaultLog
from lamina.backends.reference.simulator.shared import Lanes, SharedArray
from lamina.backends.reference.simulator.wgmma import AsyncProxy, WgmmaGroups
from lamina.core.errors import VerificationError
from lamina.core.ir import kernel_ir

_DESTINATION_ALIGNMENT = 128
"""The bytes a TMA destination in shared memory is aligned to (1024 for the 128-byte swizzle's pattern)."""


class TmaCopies:
    def __init__(self, kernel: kernel_ir.Kernel, grid: ThreadGrid, faults: FaultLog, exprs, memories: dict, sites,
                 barriers: Mbarriers, proxy: AsyncProxy):
        self.kernel, self.grid, self.faults, self.exprs, self.memories = kernel, grid, faults, exprs, memories
        self.sites, self.barriers, self.proxy = sites, barriers, proxy
        self.tags: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        """Per shared array that copies write: per element, the barrier slot (-1 for none) and the phase."""
        self.read_times: dict[str, torch.Tensor] = {}
        """Per shared array that multicast copies write: per element, the time of its last read (``Mbarriers.tick``)."""
        self.store_groups = WgmmaGroups(grid.total)
        """Each thread's groups of TMA stores, kept as wgmma's groups are."""
        self.store_reads: list[tuple[SharedArray, Lanes, int, str]] = []
        """The shared memory that pending stores read: the array, the lanes, their group and the store."""

    def build_statement(self, s, scope):
        """The runner of a ``TmaLoad``, ``TmaStore``, ``TmaStoreCommit`` or ``TmaStoreWait``."""
        if isinstance(s, kernel_ir.TmaLoad):
            return self._load(s, scope)
        if isinstance(s, kernel_ir.TmaStore):
            return self._store(s, scope)
        if isinstance(s, kernel_ir.TmaStoreCommit):
            return self.store_groups.commit
        pending = s.pending

        def wait(mask: Mask) -> None:
            self.store_groups.wait(pending, mask)
            self.store_reads = [read for read in self.store_reads
                                if bool(self.store_groups.pending(torch.tensor([read[2]]), read[1].threads[:1]))]

        return wait

    def _tensor_map(self, name: str, copy: str) -> kernel_ir.TensorMap:
        try:
            return self.kernel.tensor_map(name)
        except KeyError:
            raise VerificationError(f"kernel {self.kernel.name}: tma {copy} through unknown tensor map {name}") from None

    def _load(self, s: kernel_ir.TmaLoad, scope):
        m = self._tensor_map(s.tensor_map, "load")
        dst, src = self.memories.get(s.dst), self.memories.get(m.param)
        if not isinstance(dst, SharedArray) or not isinstance(src, GlobalArray) or dst.dtype != src.dtype:
            raise VerificationError(f"kernel {self.kernel.name}: tma load of {m.param} into {s.dst}: it copies a "
                                    "global parameter into a shared array of its type")
        self._watch(dst)
        if s.multicast:
            self.read_times.setdefault(dst.name, torch.full((dst.data.numel(),), -1))
        site = next(self.sites)
        dst_of = [self.exprs.compile(i, scope) for i in s.dst_index]
        row_of, column_of = self.exprs.compile(s.row, scope), self.exprs.compile(s.column, scope)
        slots_of = self.barriers.slots(s.barrier, s.barrier_index, scope, site)
        rows, columns = torch.arange(m.box[0]).unsqueeze(1), torch.arange(m.box[1]).unsqueeze(0)
        box_bytes = m.box[0] * m.box[1] * dst.itemsize
        text = kernel_ir.format_body((s,), "")[0]
        ranks = torch.tensor(s.multicast, dtype=torch.int64)
        if s.multicast and not all(0 <= rank < self.grid.cluster_blocks for rank in s.multicast):
            raise VerificationError(f"kernel {self.kernel.name}: `{text}` multicasts to ranks {list(s.multicast)} of "
                                    f"a cluster of {self.grid.cluster_blocks} blocks")

        def run(mask: Mask) -> None:
            threads, slots, _ = slots_of(mask)
            blocks = self._destinations(threads, ranks)
            issuers = threads.unsqueeze(1).expand_as(blocks).reshape(-1)
            slots = self.barriers.in_blocks(issuers, slots.unsqueeze(1).expand_as(blocks).reshape(-1),
                                            blocks.reshape(-1)).view_as(blocks)
            usable = self.barriers.usable(issuers, slots.reshape(-1), site, "TMA copy completing on").view_as(blocks)
            total = self.grid.total
            at = [per_thread(as_index(f(mask)), total) for f in dst_of]
            row, column = (per_thread(as_index(f(mask)), total) for f in (row_of, column_of))
            for i, thread in enumerate(threads.tolist()):
                if not bool(usable[i].any()):
                    continue
                global_rows, global_columns = int(row[thread]) + rows, int(column[thread]) + columns
                inside = ((global_rows >= 0) & (global_rows < m.shape[0])
                          & (global_columns >= 0) & (global_columns < m.shape[1]))
                offsets = torch.where(inside, global_rows * m.row_stride + global_columns, 0).reshape(-1)
                values = torch.where(inside.reshape(-1), src.data.index_select(0, offsets),
                                     torch.zeros((), dtype=src.data.dtype))
                lanes = self._box_lanes(dst, [int(place[thread]) for place in at], m.box, thread, site, text)
                if lanes is None:
                    continue
                for block, slot in zip(blocks[i][usable[i]].tolist(), slots[i][usable[i]].tolist()):
                    self._land(dst, lanes, block, values, slot, site)
                    self.barriers.complete_transaction(slot, box_bytes, thread)

        return run

    def _destinations(self, threads: torch.Tensor, ranks: torch.Tensor) -> torch.Tensor:
        """[threads, blocks]: the blocks each thread's copy lands in (its own, or those of the ranks listed)."""
        if not ranks.numel():
            return self.grid.block_id.index_select(0, threads).unsqueeze(1)
        return self.grid.cluster_first_block.index_select(0, threads).unsqueeze(1) + ranks

    def _watch(self, array: SharedArray) -> None:
        if array.name not in self.tags:
            size = array.data.numel()
            self.tags[array.name] = (torch.full((size,), -1), torch.zeros(size, dtype=torch.int64))
            array.tma = self

    def _box_lanes(self, dst: SharedArray, index: list[int], box, thread: int, site: int, text: str) -> Lanes | None:
        """The lanes of the box's elements in shared array ``dst`` (one per element, for the issuing thread); None if
        the box does not fit or is misaligned (a fault)."""
        *leading, row, column = index
        shape = dst.shape
        describe = self.grid.describe_thread(thread)
        fits = all(0 <= i < n for i, n in zip(leading, shape[:-2])) and 0 <= row and row + box[0] <= shape[-2] \
            and 0 <= column and column + box[1] <= shape[-1]
        one = torch.ones(1, dtype=torch.bool)
        if not fits:
            self.faults.add(OUT_OF_BOUNDS, (site,), one, lambda _: (
                f"`{text}` by {describe} places a [{box[0]}][{box[1]}] box in {dst.name} at {index}, outside "
                f"{list(shape)}"))
            return None
        start = 0
        for i, n in zip(index, shape):
            start = start * n + i
        alignment = 1024 if dst.swizzled is not None else _DESTINATION_ALIGNMENT
        if (start * dst.itemsize) % alignment:
            self.faults.add(MISALIGNED, (site,), one, lambda _: (
                f"`{text}` by {describe} places its box in {dst.name} from byte {start * dst.itemsize}, not "
                f"{alignment}-byte aligned"))
            return None
        rows, columns = torch.arange(box[0]).unsqueeze(1), torch.arange(box[1]).unsqueeze(0)
        flat = (start + rows * shape[-1] + columns).reshape(-1)
        block = int(self.grid.block_id[thread])
        local = int(self.grid.local_id[thread])
        count = flat.numel()
        return Lanes(torch.full((count,), thread), torch.full((count,), local), flat,
                     block * dst.numel + flat, False)

    def _land(self, dst: SharedArray, lanes: Lanes, block: int, values: torch.Tensor, slot: int, site: int) -> None:
        """The box of the issuing thread's ``lanes`` lands in ``block`` through the async proxy, where no pending wgmma
        or TMA store may still read, its elements belonging to the current phase of barrier ``slot`` there."""
        thread = int(lanes.threads[0])
        issuer = int(self.grid.block_id[thread])
        how = "written by a TMA copy"
        if block != issuer:
            lanes = Lanes(lanes.threads, lanes.local, lanes.flat, block * dst.numel + lanes.flat, False)
            how += f" multicast from {self.grid.describe_block(issuer)}"
            self._check_released(dst, lanes, thread, block, site, how)
        if dst.bulk_reads is not None:
            dst.bulk_reads.overwriting(dst, lanes, site, how)
        if dst.async_proxy is not None:
            dst.async_proxy.overwriting(dst, lanes, site, how)
            dst.async_proxy.unfenced[dst.name].index_fill_(0, lanes.elements, -1)
        dst.data.index_copy_(0, lanes.elements, values)
        dst.written.index_fill_(0, lanes.elements, True)
        barrier_slots, phases = self.tags[dst.name]
        barrier_slots.index_fill_(0, lanes.elements, slot)
        phases.index_fill_(0, lanes.elements, int(self.barriers.phase[slot]))

    def _check_released(self, dst: SharedArray, lanes: Lanes, thread: int, block: int, site: int, how: str) -> None:
        """A copy into another block lands where that block read only before it last told the copying thread."""
        read = self.read_times[dst.name].index_select(0, lanes.elements)
        heard = self.barriers.heard_from(thread, block)
        grid = self.grid
        self.faults.add(RACES, (site, "release"), read > heard, lambda i: (
            f"{dst.describe_element(lanes, i)} {how} by {grid.describe_local(int(lanes.local[i]))}, though "
            f"{grid.describe_block(block)} read it since it last told that thread (it may still be reading): that "
            "block must release the stage to the copying thread first, arriving on the copying block's barrier "
            "(MbarrierArrive with rank) that the copying thread then waits on"))

    def check_read(self, array: SharedArray, lanes: Lanes, site: int) -> None:
        """(``SharedArray.tma``) a read of what a copy wrote needs a wait on the copy's phase by the reader; the reads
        of what multicast copies write are timed."""
        if array.name in self.read_times:
            self.read_times[array.name].index_fill_(0, lanes.elements, self.barriers.tick())
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

    # --- stores ---------------------------------------------------------------

    def _store(self, s: kernel_ir.TmaStore, scope):
        m = self._tensor_map(s.tensor_map, "store")
        src, dst = self.memories.get(s.src), self.memories.get(m.param)
        if not isinstance(src, SharedArray) or not isinstance(dst, GlobalArray) or dst.dtype != src.dtype \
                or not dst.writable:
            raise VerificationError(f"kernel {self.kernel.name}: tma store of {s.src} to {m.param}: it copies a shared "
                                    "array into a writable global parameter of its type")
        self.proxy.watch(src)
        src.bulk_reads = self
        site = next(self.sites)
        src_of = [self.exprs.compile(i, scope) for i in s.src_index]
        row_of, column_of = self.exprs.compile(s.row, scope), self.exprs.compile(s.column, scope)
        rows, columns = torch.arange(m.box[0]).unsqueeze(1), torch.arange(m.box[1]).unsqueeze(0)
        text = kernel_ir.format_body((s,), "")[0]

        def run(mask: Mask) -> None:
            total = self.grid.total
            at = [per_thread(as_index(f(mask)), total) for f in src_of]
            row, column = (per_thread(as_index(f(mask)), total) for f in (row_of, column_of))
            for thread in mask.active.nonzero().squeeze(1).tolist():
                lanes = self._box_lanes(src, [int(i[thread]) for i in at], m.box, thread, site, text)
                if lanes is None:
                    continue
                if int(row[thread]) < 0 or int(column[thread]) < 0:
                    describe = self.grid.describe_thread(thread)
                    self.faults.add(OUT_OF_BOUNDS, (site, "store start"), torch.ones(1, dtype=torch.bool), lambda _: (
                        f"`{text}` by {describe} stores a box from ({int(row[thread])}, {int(column[thread])}): a TMA "
                        "store's box may reach past the tensor's end but must start inside it (the GPU stops the "
                        "kernel with an illegal instruction)"))
                    continue
                global_rows, global_columns = int(row[thread]) + rows, int(column[thread]) + columns
                inside = ((global_rows >= 0) & (global_rows < m.shape[0])
                          & (global_columns >= 0) & (global_columns < m.shape[1])).reshape(-1)
                stored = Lanes(*(part[inside] for part in (lanes.threads, lanes.local, lanes.flat, lanes.elements)),
                               every=False)
                src.check_reads(stored, site)
                self._check_fenced(src, stored, site, text)
                offsets = (global_rows * m.row_stride + global_columns).reshape(-1)[inside]
                dst.data.index_copy_(0, offsets, src.data.index_select(0, stored.elements))
                group = int(self.store_groups.committed[thread])
                self.store_reads.append((src, lanes, group, text))

        return run

    def _check_fenced(self, src: SharedArray, lanes: Lanes, site: int, text: str) -> None:
        writer = self.proxy.unfenced[src.name].index_select(0, lanes.elements)
        grid = self.grid
        self.faults.add(ASYNC_PROTOCOL, (site, "proxy"), writer >= 0, lambda i: (
            f"`{text}` by {grid.describe_thread(int(lanes.threads[i]))} reads {src.describe_element(lanes, i)}, which "
            f"{grid.describe_local(int(writer[i]) % grid.threads_per_block)} wrote with no AsyncProxyFence since: the "
            "TMA unit reads through the async proxy, which may not see the write; put an AsyncProxyFence after the "
            "writes, before the barrier"))

    def overwriting(self, array: SharedArray, lanes: Lanes, site: int, how: str) -> None:
        """(``SharedArray.bulk_reads``) a write is about to land: no pending TMA store may read there."""
        for source, read, _, text in self.store_reads:
            if source is not array:
                continue
            clash = torch.isin(lanes.elements, read.elements)
            self.faults.add(RACES, (site, "tma store"), clash, lambda i: (
                f"{array.describe_element(lanes, i)} {how} by {self.grid.describe_local(int(lanes.local[i]))} while "
                f"`{text}` still reads it: wait for the store (TmaStoreWait) before writing its source again"))

    def finish(self, site: int) -> None:
        """At the end of the kernel: every TMA store must have been waited for."""
        for source, read, _, text in self.store_reads[:1]:
            self.faults.add(ASYNC_PROTOCOL, (site, "store end"), torch.ones(1, dtype=torch.bool), lambda _: (
                f"the kernel ends while `{text}` of {self.grid.describe_thread(int(read.threads[0]))} still reads "
                f"{source.name}: commit the store (TmaStoreCommit) and wait for it (TmaStoreWait) before the end"))

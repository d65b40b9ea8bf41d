"""Shared arrays of a simulated launch: per-block storage that checks how threads share it.

Besides bounds, every element tracks:
- whether any thread wrote it since the kernel started (reading it otherwise is a fault);
- the lowest and highest id (within the block) of the threads that wrote it and that
  read it since the last barrier. An access by thread ``t`` conflicts with an earlier
  one exactly when the recorded ids are not all ``t``, so races are found with a few
  gathers and scatters per access whatever the number of threads;
- the ``cp.async`` copy still in flight into it, if any;
- for arrays that other blocks of a cluster read (``ClusterLoad``), whether it was
  stored since the last cluster barrier and whether another block read it since then.
For arrays that a wgmma reads, ``async_proxy`` (``wgmma.AsyncProxy``) hears of
every write before it lands (``overwriting``), and of ordinary stores and of ``cp.async``
data once waited for (``stored``). For arrays that TMA copies write, ``tma``
(``tma.TmaCopies``) checks every read against the mbarrier phases the reader has waited for,
and ``bulk_reads`` (the same) hears of every write, which must not land where a TMA store
still reads.

Indices stay logical; bank conflicts of a swizzled array (``Array.swizzle``) are counted
where the GPU stores its elements (``kernel_ir.swizzled_offset``).
"""

from __future__ import annotations

import math

import attrs
import torch

from lamina.backends.reference.scalar_ops import as_tensor, torch_dtype
from lamina.backends.reference.simulator.banks import count_conflicts, lanes_per_phase
from lamina.backends.reference.simulator.grid import WARP_SIZE, Mask, ThreadGrid
from lamina.backends.reference.simulator.memory import format_index, linear_index, out_of_bounds, per_thread
from lamina.backends.reference.simulator.report import MISALIGNED, OUT_OF_BOUNDS, RACES, UNWRITTEN_READS, FaultLog
from lamina.core.ir import kernel_ir

_NO_THREAD_LOW = 1 << 62
_NO_THREAD_HIGH = -1
_MAX_UNRECORDED_READS = 64


@attrs.define
class Lanes:
    """The threads taking part in one access, with the element each one touches.

    ``threads`` are grid-wide ids, ``local`` their ids within the block, ``flat`` the
    offset in the block's array and ``elements`` the offset in the storage of all blocks;
    ``every`` says that the lanes are all the threads of the grid, in order.
    """

    threads: torch.Tensor
    local: torch.Tensor
    flat: torch.Tensor
    elements: torch.Tensor
    every: bool


class SharedArray:
    def __init__(self, array: kernel_ir.Array, grid: ThreadGrid, faults: FaultLog):
        self.name = array.name
        self.dtype = array.dtype
        self.shape = tuple(array.shape)
        self.numel = math.prod(self.shape)
        self.itemsize = array.dtype.itemsize
        self.grid = grid
        self.faults = faults
        self.swizzled = array if array.swizzle else None
        self.async_proxy = None
        self.tma = None
        self.bulk_reads = None
        size = grid.blocks * self.numel
        self.data = torch.zeros(size, dtype=torch_dtype(array.dtype))
        self.written = torch.zeros(size, dtype=torch.bool)
        self.writer_low = torch.full((size,), _NO_THREAD_LOW)
        self.writer_high = torch.full((size,), _NO_THREAD_HIGH)
        self.reader_low = torch.full((size,), _NO_THREAD_LOW)
        self.reader_high = torch.full((size,), _NO_THREAD_HIGH)
        self.pending_copy = torch.full((size,), -1)
        self.pending_thread = torch.full((size,), -1)
        self.writes_since_barrier = False
        self.reads_since_barrier = False
        self.unrecorded_reads: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.has_pending = False
        self.block_base = grid.block_id * self.numel
        self.bank_conflicts = 0
        self.bank_patterns: dict[tuple, tuple] = {}
        self.cluster_checks = False
        self.stored_since_cluster_barrier = torch.zeros(size, dtype=torch.bool)
        self.read_by_cluster = torch.zeros(size, dtype=torch.bool)

    # --- the accesses ---------------------------------------------------------

    def read(self, indices: list[torch.Tensor], mask: Mask, site: int) -> torch.Tensor:
        values, lanes = self.read_uncounted(indices, mask, site, "load from")
        if lanes is not None:
            self._count_banks(lanes, self.itemsize, site)
        return values

    def read_uncounted(self, indices: list[torch.Tensor], mask: Mask, site: int,
                       verb: str) -> tuple[torch.Tensor, Lanes | None]:
        """Each running thread's element and the lanes that read (None if none), checked like any
        read but not counted for bank conflicts: a wgmma's tensor cores read whole swizzled rows."""
        lanes = self.lanes(indices, mask, site, verb)
        if lanes is None:
            return torch.zeros(self.grid.total, dtype=self.data.dtype), None
        values = self.data.index_select(0, lanes.elements)
        self._check_read(lanes, site)
        if lanes.every:
            return values, lanes
        out = torch.zeros(self.grid.total, dtype=values.dtype)
        return out.index_copy_(0, lanes.threads, values), lanes

    def read_vector(self, indices: list[torch.Tensor], mask: Mask, site: int, width: int) -> tuple[torch.Tensor, Mask]:
        """``width`` consecutive elements from each running thread's ``indices`` ([threads, width]),
        read in one access, and the threads that made it: a thread whose access is out of bounds
        or not aligned to its size (the array starts 16-byte aligned) is reported and reads zeros."""
        total = self.grid.total
        values = torch.zeros((total, width), dtype=self.data.dtype)
        loaded = torch.zeros(total, dtype=torch.bool)
        lanes = self._aligned_lanes(indices, mask, site, width, "load", "from")
        if lanes is None:
            return values, Mask(loaded)
        self._count_banks(lanes, width * self.itemsize, site)
        wide = _widen(lanes, width)
        self._check_read(wide, site)
        read = self.data.index_select(0, wide.elements).view(-1, width)
        if lanes.every:
            return read, mask
        return values.index_copy_(0, lanes.threads, read), Mask(loaded.index_fill_(0, lanes.threads, True))

    def _aligned_lanes(self, indices: list[torch.Tensor], mask: Mask, site: int, width: int, verb: str,
                       preposition: str) -> Lanes | None:
        """The lanes of a vector access of ``width`` elements that lie in bounds and aligned to its
        size; the others are reported. None where none is left."""
        lanes = self.lanes(indices, mask, site, f"vector {verb} {preposition}", width)
        if lanes is None:
            return None
        size = width * self.itemsize
        misaligned = lanes.flat % width != 0
        if self.faults.add(MISALIGNED, (site, "shared"), misaligned, lambda i: (
                f"vector {verb} of {size} B {preposition} {self.describe_element(lanes, i)} at byte "
                f"{int(lanes.flat[i]) * self.itemsize} of the array is not {size}-byte aligned, "
                f"by {self._thread(lanes, i)}")):
            lanes = select_lanes(lanes, ~misaligned)
            if lanes.threads.numel() == 0:
                return None
        return lanes

    def write_vector(self, indices: list[torch.Tensor], values: torch.Tensor, mask: Mask, site: int) -> None:
        """``values`` ([threads, width]) to ``width`` consecutive elements from each running thread's
        ``indices``, written in one access: a thread whose access is out of bounds or not aligned to
        its size is reported and writes nothing."""
        width = values.shape[1]
        lanes = self._aligned_lanes(indices, mask, site, width, "store", "to")
        if lanes is None:
            return
        self._count_banks(lanes, width * self.itemsize, site)
        stored = values.index_select(0, lanes.threads).to(self.data.dtype)
        wide = _widen(lanes, width)
        self._check_write(wide, site, "written")
        self._check_cluster_write(wide, site)
        self.data.index_copy_(0, wide.elements, stored.reshape(-1))
        self.written.index_fill_(0, wide.elements, True)
        if self.async_proxy is not None:
            self.async_proxy.stored(self, wide.elements, wide.threads)

    def write(self, indices: list[torch.Tensor], value: torch.Tensor, mask: Mask, site: int) -> None:
        lanes = self.lanes(indices, mask, site, "store to")
        if lanes is None:
            return
        value = per_thread(as_tensor(value, self.dtype), self.grid.total)
        if not lanes.every:
            value = value.index_select(0, lanes.threads)
        self._check_write(lanes, site, "written")
        self._check_cluster_write(lanes, site)
        self.data.index_copy_(0, lanes.elements, value.contiguous())
        self.written.index_fill_(0, lanes.elements, True)
        self._count_banks(lanes, self.itemsize, site)
        if self.async_proxy is not None:
            self.async_proxy.stored(self, lanes.elements, lanes.threads)

    def write_async(self, lanes: Lanes, values: torch.Tensor, copy: int, site: int) -> Lanes:
        """Start a ``cp.async`` of ``values`` ([lanes, width]) to consecutive elements from each
        lane's; returns the lanes of the elements written, one per element."""
        width = values.shape[1]
        self._count_banks(lanes, width * self.itemsize, site)
        if width > 1:
            lanes = _widen(lanes, width)
        self._check_write(lanes, site, "written by cp.async")
        self._check_cluster_write(lanes, site)
        self.data.index_copy_(0, lanes.elements, values.reshape(-1))
        self.written.index_fill_(0, lanes.elements, True)
        self.pending_copy.index_fill_(0, lanes.elements, copy)
        self.pending_thread.index_copy_(0, lanes.elements, lanes.threads)
        self.has_pending = True
        return lanes

    def complete_async(self, lanes: Lanes, copy: int) -> None:
        """The copy's data has landed: from now on it counts as written by its threads."""
        still = (self.pending_copy.index_select(0, lanes.elements) == copy).nonzero().squeeze(1)
        elements = lanes.elements.index_select(0, still)
        local = lanes.local.index_select(0, still)
        self.pending_copy.index_fill_(0, elements, -1)
        self.pending_thread.index_fill_(0, elements, -1)
        self.writer_low.scatter_reduce_(0, elements, local, "amin")
        self.writer_high.scatter_reduce_(0, elements, local, "amax")
        self.writes_since_barrier = True
        if self.async_proxy is not None:
            self.async_proxy.stored(self, elements, lanes.threads.index_select(0, still))

    def barrier(self, blocks: torch.Tensor | None) -> None:
        """Forget who touched what in ``blocks`` (all when None): their threads are synchronised."""
        if blocks is None:
            self.unrecorded_reads.clear()
        else:
            self._record_reads()
        trackers = ((self.writer_low, _NO_THREAD_LOW), (self.writer_high, _NO_THREAD_HIGH),
                    (self.reader_low, _NO_THREAD_LOW), (self.reader_high, _NO_THREAD_HIGH))
        for tracker, empty in trackers:
            if blocks is None:
                tracker.fill_(empty)
            else:
                tracker.view(self.grid.blocks, self.numel).index_fill_(0, blocks, empty)
        if blocks is None:
            self.writes_since_barrier = False
            self.reads_since_barrier = False

    # --- the other blocks of a cluster -----------------------------------------

    def read_from_cluster(self, indices: list[torch.Tensor], rank: torch.Tensor, mask: Mask, site: int) -> torch.Tensor:
        """Each running thread's element of the array of block ``rank`` of its cluster."""
        out = torch.zeros(self.grid.total, dtype=self.data.dtype)
        lanes = self.lanes(indices, mask, site, "cluster load from")
        if lanes is None:
            return out
        grid = self.grid
        rank = per_thread(torch.as_tensor(rank).long(), grid.total).index_select(0, lanes.threads)
        outside = (rank < 0) | (rank >= grid.cluster_blocks)
        if self.faults.add(OUT_OF_BOUNDS, (site, "rank"), outside, lambda i: (
                f"cluster load from {self.name} of block {int(rank[i])} of a cluster of {grid.cluster_blocks}, "
                f"by {grid.describe_thread(int(lanes.threads[i]))}")):
            lanes, rank = select_lanes(lanes, ~outside), rank[~outside]
            if lanes.threads.numel() == 0:
                return out
        owner = grid.cluster_first_block.index_select(0, lanes.threads) + rank
        elements = owner * self.numel + lanes.flat
        peer = Lanes(lanes.threads, lanes.local, lanes.flat, elements, False)
        self.faults.add(UNWRITTEN_READS, (site,), ~self.written.index_select(0, elements), lambda i: (
            f"cluster load of unwritten shared memory {self.describe_element(peer, i)} "
            f"by {grid.describe_thread(int(lanes.threads[i]))}"))
        self.faults.add(RACES, (site, "cluster"), self.stored_since_cluster_barrier.index_select(0, elements),
                        lambda i: (f"cluster load of {self.describe_element(peer, i)} by "
                                   f"{grid.describe_thread(int(lanes.threads[i]))}: it was stored with no cluster "
                                   "barrier between"))
        self.read_by_cluster.index_fill_(0, elements, True)
        return out.index_copy_(0, lanes.threads, self.data.index_select(0, elements))

    def cluster_barrier(self) -> None:
        """Every block of every cluster is synchronised."""
        self.barrier(None)
        if self.cluster_checks:
            self.stored_since_cluster_barrier.fill_(False)
            self.read_by_cluster.fill_(False)

    def _check_cluster_write(self, lanes: Lanes, site: int) -> None:
        if not self.cluster_checks:
            return
        read = self.read_by_cluster.index_select(0, lanes.elements)
        self.faults.add(RACES, (site, "cluster"), read, lambda i: (
            f"{self.describe_element(lanes, i)} stored by {self._thread(lanes, i)} while another block of its cluster "
            "may still be reading it: put a cluster barrier between"))
        self.stored_since_cluster_barrier.index_fill_(0, lanes.elements, True)

    def check_cluster_reads_finished(self, site: int) -> None:
        """At the end of the kernel: a block may finish only once its cluster stopped reading its memory."""
        if not self.cluster_checks:
            return
        blocks = self.read_by_cluster.view(self.grid.blocks, self.numel).any(1)
        self.faults.add(RACES, (site, "cluster end"), blocks, lambda block: (
            f"{self.name} of {self.grid.describe_block(block)} is read by another block of its cluster after the "
            "last cluster barrier, so its block may have finished: end with a cluster barrier"))

    # --- the lanes of an access ----------------------------------------------

    def lanes(self, indices: list[torch.Tensor], mask: Mask, site: int, verb: str, width: int = 1) -> Lanes | None:
        """The running threads whose access is in bounds (faulting the others); None if no thread is left."""
        grid = self.grid
        bad = out_of_bounds(indices, self.shape, mask, width)
        active, every = mask.active, mask.full
        if bad is not None:
            span = "" if width == 1 else f" ({width} elements)"
            shape = "".join(f"[{n}]" for n in self.shape)

            def describe(thread: int) -> str:
                return (f"{verb} {self.name} at {format_index(indices, thread)}{span}, outside {shape}, "
                        f"by {grid.describe_thread(thread)}")

            if self.faults.add(OUT_OF_BOUNDS, (site,), bad, describe):
                active, every = active & ~bad, False
        flat = per_thread(linear_index(indices, self.shape), grid.total)
        if every:
            return Lanes(grid.thread_ids, grid.local_id, flat, self.block_base + flat, True)
        threads = active.nonzero().squeeze(1)
        if threads.numel() == 0:
            return None
        flat = flat.index_select(0, threads)
        elements = self.block_base.index_select(0, threads) + flat
        return Lanes(threads, grid.local_id.index_select(0, threads), flat, elements, False)

    # --- the checks -----------------------------------------------------------

    def _check_read(self, lanes: Lanes, site: int) -> None:
        elements, local = lanes.elements, lanes.local
        unwritten = ~self.written.index_select(0, elements)
        self.faults.add(UNWRITTEN_READS, (site,), unwritten, lambda i: (
            f"read of unwritten shared memory {self.describe_element(lanes, i)} by {self._thread(lanes, i)}"))
        if self.tma is not None:
            self.tma.check_read(self, lanes, site)
        if self.has_pending:
            copier = self.pending_thread.index_select(0, elements)
            self.faults.add(RACES, (site, "early"), copier >= 0, lambda i: (
                f"read of cp.async data before its wait: {self.describe_element(lanes, i)} read by "
                f"{self._thread(lanes, i)}, copied by {self._copier(copier, i)}"))
        if self.writes_since_barrier:
            self._check_conflict(lanes, site, self.writer_low, self.writer_high, "write-read",
                                 "written by {other} and then read by {this}")
        self.unrecorded_reads.append((elements, local))
        if len(self.unrecorded_reads) > _MAX_UNRECORDED_READS:
            self._record_reads()
        self.reads_since_barrier = True

    def _record_reads(self) -> None:
        """Fold the reads since the last barrier into the reader trackers. Most reads are
        followed by a barrier before any write, so they are only recorded when a write comes."""
        for elements, local in self.unrecorded_reads:
            self.reader_low.scatter_reduce_(0, elements, local, "amin")
            self.reader_high.scatter_reduce_(0, elements, local, "amax")
        self.unrecorded_reads.clear()

    def check_reads(self, lanes: Lanes, site: int) -> None:
        """Check the reads of ``lanes`` as any read (a TMA store's, which counts no bank conflicts)."""
        self._check_read(lanes, site)

    def _check_write(self, lanes: Lanes, site: int, how: str) -> None:
        elements = lanes.elements
        if self.async_proxy is not None:
            self.async_proxy.overwriting(self, lanes, site, how)
        if self.bulk_reads is not None:
            self.bulk_reads.overwriting(self, lanes, site, how)
        if self.has_pending:
            copier = self.pending_thread.index_select(0, elements)
            self.faults.add(RACES, (site, "overwrite"), copier >= 0, lambda i: (
                f"{self.describe_element(lanes, i)} {how} by {self._thread(lanes, i)} while a cp.async "
                f"by {self._copier(copier, i)} into it is still in flight"))
        if self.reads_since_barrier:
            self._record_reads()
            self._check_conflict(lanes, site, self.reader_low, self.reader_high, "read-write",
                                 "read by {other} and then " + how + " by {this}")
        self.writer_low.scatter_reduce_(0, elements, lanes.local, "amin")
        self.writer_high.scatter_reduce_(0, elements, lanes.local, "amax")
        self._check_conflict(lanes, site, self.writer_low, self.writer_high, "write-write",
                             "written by {other} and " + how + " by {this}")
        self.writes_since_barrier = True

    def _check_conflict(self, lanes: Lanes, site: int, low: torch.Tensor, high: torch.Tensor,
                        kind: str, story: str) -> None:
        """Fault the lanes whose element another thread of the block accessed since the last barrier."""
        local = lanes.local
        first = low.index_select(0, lanes.elements)
        last = high.index_select(0, lanes.elements)
        race = (last >= 0) & ((first != local) | (last != local))

        def describe(i: int) -> str:
            other = int(first[i]) if int(first[i]) != int(local[i]) else int(last[i])
            words = story.format(other=self.grid.describe_local(other), this=self.grid.describe_local(int(local[i])))
            return f"{kind} race on shared memory {self.describe_element(lanes, i)}: {words} with no barrier between"

        self.faults.add(RACES, (site, kind), race, describe)

    def _count_banks(self, lanes: Lanes, bytes_per_lane: int, site: int) -> None:
        """Add the access's conflicts. A site usually repeats one pattern, shifted by a uniform
        offset from one loop iteration to the next: a whole-word shift only renames the banks,
        so the last count of the site is reused when the lanes and relative offsets match."""
        flat = lanes.flat if self.swizzled is None else kernel_ir.swizzled_offset(self.swizzled, lanes.flat)
        base = int(flat[0])
        relative = flat - base
        reusable = (base * self.itemsize) % 4 == 0
        known = self.bank_patterns.get(site)
        if (reusable and known is not None and known[0] == bytes_per_lane
                and _same(known[1], None if lanes.every else lanes.threads) and _same(known[2], relative)):
            self.bank_conflicts += known[3]
            return
        grid = self.grid
        per_phase = lanes_per_phase(bytes_per_lane)
        phases_per_warp = WARP_SIZE // per_phase
        warp, lane = grid.warp_id, grid.lane
        if not lanes.every:
            warp, lane = warp.index_select(0, lanes.threads), lane.index_select(0, lanes.threads)
        phase = warp * phases_per_warp + (lane >> _log2(per_phase)) if phases_per_warp > 1 else warp
        first_word = (flat << _log2(self.itemsize)) >> 2
        phases = grid.blocks * grid.warps_per_block * phases_per_warp
        conflicts = count_conflicts(phase, first_word, max(1, bytes_per_lane // 4), phases)
        self.bank_conflicts += conflicts
        if reusable:
            self.bank_patterns[site] = (bytes_per_lane, None if lanes.every else lanes.threads, relative, conflicts)

    # --- words for people -----------------------------------------------------

    def describe_element(self, lanes: Lanes, i: int) -> str:
        """Lane ``i``'s element, in the block whose memory holds it (not always the thread's, in a cluster)."""
        flat = int(lanes.flat[i])
        index = []
        for extent in reversed(self.shape):
            flat, position = divmod(flat, extent)
            index.append(position)
        block = int(lanes.elements[i]) // self.numel
        text = "".join(f"[{n}]" for n in reversed(index))
        return f"{self.name}{text} in {self.grid.describe_block(block)}"

    def _thread(self, lanes: Lanes, i: int) -> str:
        return self.grid.describe_local(int(lanes.local[i]))

    def _copier(self, copier: torch.Tensor, i: int) -> str:
        return self.grid.describe_local(int(copier[i]) % self.grid.threads_per_block)


def _same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.shape == b.shape and torch.equal(a, b)


def _log2(n: int) -> int:
    return n.bit_length() - 1


def _repeat(values: torch.Tensor, times: int) -> torch.Tensor:
    return values.unsqueeze(1).expand(-1, times).reshape(-1)


def _widen(lanes: Lanes, width: int) -> Lanes:
    """One lane per element of each lane's ``width`` consecutive elements."""
    steps = torch.arange(width)
    return Lanes(
        threads=_repeat(lanes.threads, width),
        local=_repeat(lanes.local, width),
        flat=(lanes.flat.unsqueeze(1) + steps).reshape(-1),
        elements=(lanes.elements.unsqueeze(1) + steps).reshape(-1),
        every=False,
    )


def select_lanes(lanes: Lanes, keep: torch.Tensor) -> Lanes:
    """The lanes where ``keep`` is true."""
    which = keep.nonzero().squeeze(1)
    return Lanes(
        threads=lanes.threads.index_select(0, which),
        local=lanes.local.index_select(0, which),
        flat=lanes.flat.index_select(0, which),
        elements=lanes.elements.index_select(0, which),
        every=False,
    )


"""Hopper's mbarriers in the Kernel IR simulator: phases, arrivals and transaction bytes, exactly.

Every mbarrier of every block holds its completed phases (the current phase's number), the
arrivals its phase still waits for, the arrivals each phase expects, and the transaction bytes
still to land (raised by an arrive that expects them, lowered by the TMA copies completing on
it; PTX ISA, "mbarrier: Phase Completion"). A phase completes when both reach zero: the barrier
moves to the next phase and its arrivals start again. The bytes may go below zero for a while,
where a copy (a peer's multicast, say) lands before the arrive that expects it; the phase still
waits for that arrival. A wait for parity ``p`` passes when the barrier's current phase has the
other parity, so that the phase of parity ``p`` before it has completed; it blocks the task of
its threads otherwise (``tasks``), a deadlock being reported with each barrier's state.

In a cluster, a block may arrive on the same barrier of another block (``MbarrierArrive.rank``),
and a multicast TMA copy completes on the barrier of each block it lands in. Such a use by
another block needs a ``ClusterBarrier`` after the init, as a block's own threads need a
``Barrier``; and the block it lands in must still be running: it must wait to see that phase
complete, or the cluster must meet at a ``ClusterBarrier`` after it (else the block may have
ended). A thread that waits on a phase in which another block arrived hears of that block's
accesses up to its arrival (``heard``), as it does of every block's at a ``ClusterBarrier``:
what ``tma`` needs to tell whether a block released a stage before another refilled it.

It reports, as ``async_protocol`` faults, a barrier used before its init or by a thread that
no ``Barrier`` (or ``ClusterBarrier``) separates from the init, more arrivals than a phase
expects, and a use by another block of a block that may have ended; a rank outside the cluster
is ``out_of_bounds``. Each thread remembers the phases it has seen complete, so that reading
what a TMA copy wrote before waiting on its phase is a race (``tma``).
"""

from __future__ import annotations

from typing import Callable

import torch

from lamina.backends.reference.simulator.grid import Mask, ThreadGrid
from lamina.backends.reference.simulator.memory import as_index, format_index, linear_index, out_of_bounds, per_thread
from lamina.backends.reference.simulator.report import ASYNC_PROTOCOL, OUT_OF_BOUNDS, FaultLog
from lamina.backends.reference.simulator.tasks import Tasks
from lamina.core.errors import VerificationError
from lamina.core.ir import dtypes, kernel_ir

Runner = Callable[[Mask], None]


class Mbarriers:
    """The mbarrier arrays of a launch (``barrier_arrays``) and the state of each barrier, per block."""

    def __init__(self, kernel: kernel_ir.Kernel, grid: ThreadGrid, faults: FaultLog, exprs, sites,
                 tasks: Tasks | None):
        self.kernel, self.grid, self.faults, self.exprs, self.sites, self.tasks = kernel.name, grid, faults, exprs, \
            sites, tasks
        self.first: dict[str, int] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}
        count = 0
        for name in sorted(kernel_ir.barrier_arrays(kernel.body)):
            array = kernel.array(name)
            if not isinstance(array, kernel_ir.Array) or array.space != "shared" or array.dtype != dtypes.int64:
                raise VerificationError(f"kernel {kernel.name}: mbarrier {name} is not a shared int64 array")
            self.first[name], self.shapes[name] = count, tuple(array.shape)
            count += array.bytes // array.dtype.itemsize
        self.per_block = count
        slots = grid.blocks * count
        self.initialised = torch.zeros(slots, dtype=torch.bool)
        self.visible = torch.zeros(slots, dtype=torch.bool)
        self.cluster_visible = torch.zeros(slots, dtype=torch.bool)
        """Whether a ``ClusterBarrier`` came since the init: the other blocks of the cluster may use it."""
        self.init_thread = torch.full((slots,), -1)
        self.expected = torch.zeros(slots, dtype=torch.int64)
        self.pending = torch.zeros(slots, dtype=torch.int64)
        self.transaction_bytes = torch.zeros(slots, dtype=torch.int64)
        self.phase = torch.zeros(slots, dtype=torch.int64)
        self.seen = torch.zeros((grid.total, max(count, 1)), dtype=torch.int64)
        """Per thread and barrier of its block: the phases it has seen complete (by a wait)."""
        self.remote_phase = torch.full((slots,), -1)
        self.remote_thread = torch.full((slots,), -1)
        self.remote_copy = torch.zeros(slots, dtype=torch.bool)
        """Per barrier that another block used since the last ``ClusterBarrier``: the phase it arrived or landed in
        (-1 for none, or once its own block saw that phase complete), the thread, and whether it was a copy."""
        self.clock = 0
        """Counts the accesses that order blocks: a block's reads, arrivals and cluster barriers, in the order run."""
        ranks = grid.cluster_blocks
        self.arriving = torch.full((slots, ranks), -1)
        self.released = torch.full((slots, ranks), -1)
        """Per barrier and rank of its cluster: the time of that block's last arrival on it, in the current phase and
        in the phases completed."""
        self.heard = torch.zeros((grid.total, ranks), dtype=torch.int64)
        """Per thread and rank of its cluster: up to when that block's accesses are ordered before the thread's next
        ones (by a ClusterBarrier, or by a wait on a phase that block arrived in)."""

    def build(self, s, scope) -> Runner:
        site = next(self.sites)
        slots_of = self._slots_of(s.barrier, s.index, scope, site)
        if isinstance(s, kernel_ir.MbarrierInit):
            return lambda mask: self._init(slots_of(mask), s.arrivals)
        if isinstance(s, kernel_ir.MbarrierArrive) and s.rank is None:
            return lambda mask: self._arrive(slots_of(mask), s.transaction_bytes, site)
        if isinstance(s, kernel_ir.MbarrierArrive):
            rank_of = self.exprs.compile(s.rank, scope)
            return lambda mask: self._arrive(self._of_rank(slots_of(mask), rank_of(mask), site), s.transaction_bytes,
                                             site)
        parity_of = self.exprs.compile(s.parity, scope)
        return lambda mask: self._wait(slots_of(mask), parity_of(mask), site)

    def slots(self, barrier: str, index: tuple, scope, site: int) -> Callable[[Mask], tuple]:
        """For a TMA copy: the running threads and the slot of the barrier each names."""
        return self._slots_of(barrier, index, scope, site)

    def in_blocks(self, threads: torch.Tensor, slots: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
        """The slots of the same barriers as ``slots`` (of the threads' own blocks) in ``blocks``."""
        return slots + (blocks - self.grid.block_id.index_select(0, threads)) * self.per_block

    def barrier(self, blocks: torch.Tensor | None) -> None:
        """A ``Barrier`` of ``blocks`` (all when None): their inits are visible to all their threads."""
        if blocks is None:
            self.visible.copy_(self.initialised)
        else:
            view = self.visible.view(self.grid.blocks, -1)
            view.index_copy_(0, blocks, self.initialised.view(self.grid.blocks, -1).index_select(0, blocks))

    def cluster_barrier(self) -> None:
        """A ``ClusterBarrier`` (which every block reaches at once here): inits are visible across each cluster, and
        every block is still running when the others' earlier arrivals and copies reach it."""
        self.barrier(None)
        self.cluster_visible.copy_(self.initialised)
        self.remote_phase.fill_(-1)
        self.heard.fill_(self.tick())

    def tick(self) -> int:
        """The time of an access that orders blocks, after every earlier one."""
        self.clock += 1
        return self.clock

    def heard_from(self, thread: int, block: int) -> int:
        """Up to when the accesses of ``block`` are ordered before the next ones of ``thread``, of its cluster."""
        return int(self.heard[thread, self.grid.rank_of(block)])

    def finish(self, site: int) -> None:
        """At the end of the kernel: no block may have ended before another block's arrival or copy reached it."""
        grid = self.grid

        def describe(slot: int) -> str:
            rank = grid.rank_of(slot // self.per_block)
            what = "a multicast TMA copy" if bool(self.remote_copy[slot]) else "an arrival"
            return (f"{what} by {grid.describe_thread(int(self.remote_thread[slot]))} reaches {self.describe(slot)} "
                    f"after the last ClusterBarrier, in phase {int(self.remote_phase[slot])}, which no thread of that "
                    f"block waits to see complete: the block of rank {rank} may have ended; keep the cluster's blocks "
                    "alive with a ClusterBarrier at the end")

        self.faults.add(ASYNC_PROTOCOL, (site, "ended"), self.remote_phase >= 0, describe)

    # --- the operations -----------------------------------------------------

    def _slots_of(self, name: str, index: tuple, scope, site: int):
        if name not in self.first:
            raise VerificationError(f"kernel {self.kernel}: {name} is not an mbarrier array")
        shape, first, grid = self.shapes[name], self.first[name], self.grid
        index_of = [self.exprs.compile(i, scope) for i in index]

        def run(mask: Mask) -> tuple[torch.Tensor, torch.Tensor, str]:
            indices = [f(mask) for f in index_of]
            active = mask.active
            bad = out_of_bounds(indices, shape, mask)
            if bad is not None and self.faults.add(OUT_OF_BOUNDS, (site,), bad, lambda t: (
                    f"mbarrier {name}{format_index(indices, t)} outside {list(shape)}, by {grid.describe_thread(t)}")):
                active = active & ~bad
            threads = active.nonzero().squeeze(1)
            flat = per_thread(as_index(linear_index(indices, shape)), grid.total).index_select(0, threads)
            slots = grid.block_id.index_select(0, threads) * self.per_block + first + flat
            return threads, slots, name

        return run

    def _of_rank(self, found, rank: torch.Tensor, site: int):
        """The same barriers in the block of rank ``rank`` of each thread's cluster; a rank outside is a fault."""
        threads, slots, name = found
        grid = self.grid
        rank = per_thread(as_index(rank), grid.total).index_select(0, threads)
        outside = (rank < 0) | (rank >= grid.cluster_blocks)
        if self.faults.add(OUT_OF_BOUNDS, (site, "rank"), outside, lambda i: (
                f"arrive on {self._element(int(slots[i]) % self.per_block)} of the block of rank {int(rank[i])}, "
                f"outside its cluster of {grid.cluster_blocks} blocks, by {grid.describe_thread(int(threads[i]))}")):
            inside = ~outside
            threads, slots, rank = threads[inside], slots[inside], rank[inside]
        blocks = grid.cluster_first_block.index_select(0, threads) + rank
        return threads, self.in_blocks(threads, slots, blocks), name

    def _init(self, found, arrivals: int) -> None:
        threads, slots, _ = found
        self.initialised.index_fill_(0, slots, True)
        self.visible.index_fill_(0, slots, False)
        self.cluster_visible.index_fill_(0, slots, False)
        self.init_thread.index_copy_(0, slots, self.grid.local_id.index_select(0, threads))
        for state, value in ((self.expected, arrivals), (self.pending, arrivals), (self.transaction_bytes, 0),
                             (self.phase, 0)):
            state.index_fill_(0, slots, value)

    def usable(self, threads: torch.Tensor, slots: torch.Tensor, site: int, verb: str) -> torch.Tensor:
        """Which of the threads may use their barrier: initialised, and the init seen through a ``Barrier`` (a
        ``ClusterBarrier`` where the barrier is another block's)."""
        grid = self.grid
        local = grid.local_id.index_select(0, threads)
        remote = torch.div(slots, self.per_block, rounding_mode="floor") != grid.block_id.index_select(0, threads)
        initialised = self.initialised.index_select(0, slots)
        init_thread = self.init_thread.index_select(0, slots)
        unseen = initialised & ~remote & ~self.visible.index_select(0, slots) & (init_thread != local)
        unseen_by_cluster = initialised & remote & ~self.cluster_visible.index_select(0, slots)

        def user(i: int) -> str:
            return f"{verb} {self.describe(int(slots[i]))} by {grid.describe_thread(int(threads[i]))}"

        self.faults.add(ASYNC_PROTOCOL, (site, "init"), ~initialised, lambda i: f"{user(i)} before its init")
        self.faults.add(ASYNC_PROTOCOL, (site, "unseen"), unseen, lambda i: (
            f"{user(i)}, with no barrier since {grid.describe_local(int(init_thread[i]))} initialised it: put a "
            "Barrier after the init"))
        self.faults.add(ASYNC_PROTOCOL, (site, "unseen by cluster"), unseen_by_cluster, lambda i: (
            f"{user(i)}, a thread of another block of its cluster, with no ClusterBarrier since "
            f"{grid.describe_local(int(init_thread[i]))} initialised it: put a ClusterBarrier after the init"))
        return initialised

    def _from_afar(self, threads: torch.Tensor, slots: torch.Tensor, copy: bool) -> None:
        """Remember the uses of barriers by threads of other blocks, in the barriers' current phases."""
        remote = torch.div(slots, self.per_block, rounding_mode="floor") != self.grid.block_id.index_select(0, threads)
        if not bool(remote.any()):
            return
        threads, slots = threads[remote], slots[remote]
        self.remote_phase.index_copy_(0, slots, self.phase.index_select(0, slots))
        self.remote_thread.index_copy_(0, slots, threads)
        self.remote_copy.index_fill_(0, slots, copy)
        if not copy:
            self.arriving.index_put_((slots, self.grid.cluster_rank.index_select(0, threads)),
                                     torch.tensor(self.tick()))

    def _arrive(self, found, transaction_bytes: int, site: int) -> None:
        threads, slots, _ = found
        usable = self.usable(threads, slots, site, "arrive on")
        threads, slots = threads[usable], slots[usable]
        if not slots.numel():
            return
        self._from_afar(threads, slots, False)
        if transaction_bytes:
            self.transaction_bytes.index_add_(0, slots, torch.full_like(slots, transaction_bytes))
        counts = torch.bincount(slots, minlength=self.pending.numel())
        self.pending -= counts
        too_many = self.pending < 0
        self.faults.add(ASYNC_PROTOCOL, (site, "arrivals"), too_many, lambda slot: (
            f"{int(counts[slot])} arrivals on {self.describe(slot)}, whose phase waited for "
            f"{int(self.pending[slot] + counts[slot])}: a phase takes exactly the arrivals its init expects"))
        self.pending.clamp_(min=0)
        self._complete()

    def complete_transaction(self, slot: int, count: int, thread: int) -> None:
        """The ``count`` bytes of a TMA copy by ``thread`` landed on barrier ``slot``, in its current phase."""
        self._from_afar(torch.tensor([thread]), torch.tensor([slot]), True)
        self.transaction_bytes[slot] -= count
        self._complete()

    def _complete(self) -> None:
        done = self.initialised & (self.pending == 0) & (self.transaction_bytes == 0)
        if not bool(done.any()):
            return
        self.phase += done.to(torch.int64)
        finished = done.unsqueeze(1)
        self.released = torch.where(finished, torch.maximum(self.released, self.arriving), self.released)
        self.arriving.masked_fill_(finished, -1)
        self.pending.copy_(torch.where(done, self.expected, self.pending))
        if self.tasks is not None:
            self.tasks.let_others_run()

    def _wait(self, found, parity: torch.Tensor, site: int) -> None:
        threads, slots, _ = found
        if not threads.numel():
            return
        usable = self.usable(threads, slots, site, "wait on")
        threads, slots = threads[usable], slots[usable]
        parity = per_thread(as_index(parity), self.grid.total).index_select(0, threads) % 2
        waiting = _PhaseWait(self, threads, slots, parity)
        if not waiting.ready():
            self.tasks.block(waiting)  # a kernel that waits on mbarriers always runs as tasks
        block = self.grid.block_id.index_select(0, threads)
        within = slots - block * self.per_block
        seen = self.seen.view(-1)
        at = threads * self.seen.shape[1] + within
        phase = self.phase.index_select(0, slots)
        seen.index_copy_(0, at, torch.maximum(seen.index_select(0, at), phase))
        self.remote_phase.index_fill_(0, slots[phase > self.remote_phase.index_select(0, slots)], -1)
        self.heard.index_copy_(0, threads, torch.maximum(self.heard.index_select(0, threads),
                                                         self.released.index_select(0, slots)))

    # --- words for people -----------------------------------------------------

    def describe(self, slot: int) -> str:
        block, within = divmod(slot, self.per_block)
        return f"mbarrier {self._element(within)} of {self.grid.describe_block(block)}"

    def _element(self, within: int) -> str:
        """The array and index of the barrier at ``within`` in each block's barriers."""
        name = max((n for n in self.first if self.first[n] <= within), key=lambda n: self.first[n])
        flat, index = within - self.first[name], []
        for extent in reversed(self.shapes[name]):
            flat, position = divmod(flat, extent)
            index.append(position)
        return f"{name}{''.join(f'[{n}]' for n in reversed(index))}"

    def state(self, slot: int) -> str:
        return (f"in phase {int(self.phase[slot])}, {int(self.pending[slot])} of its {int(self.expected[slot])} "
                f"arrivals and {int(self.transaction_bytes[slot])} transaction bytes still to come")

    def phase_seen(self, threads: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """The phases of barrier ``slots[i]`` that thread ``threads[i]`` has seen complete."""
        within = slots - self.grid.block_id.index_select(0, threads) * self.per_block
        return self.seen.view(-1).index_select(0, threads * self.seen.shape[1] + within)


class _PhaseWait:
    """Threads waiting, each for the phase of its parity of its barrier."""

    def __init__(self, barriers: Mbarriers, threads: torch.Tensor, slots: torch.Tensor, parity: torch.Tensor):
        self.barriers, self.threads, self.slots, self.parity = barriers, threads, slots, parity

    def blocked(self) -> torch.Tensor:
        return self.barriers.phase.index_select(0, self.slots) % 2 == self.parity

    def ready(self) -> bool:
        return not bool(self.blocked().any())

    def describe(self) -> str:
        blocked = self.blocked()
        i = int(blocked.nonzero()[0])
        slot, grid = int(self.slots[i]), self.barriers.grid
        others = int(blocked.sum()) - 1
        more = f" (and {others} more threads)" if others else ""
        return (f"{grid.describe_thread(int(self.threads[i]))}{more} waits for the phase of parity "
                f"{int(self.parity[i])} of {self.barriers.describe(slot)}, {self.barriers.state(slot)}")

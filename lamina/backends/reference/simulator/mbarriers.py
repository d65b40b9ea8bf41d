"""Hopper's mbarriers in the Kernel IR simulator: phases, arrivals and transaction bytes, exactly.

Every mbarrier of every block holds its completed phases (the current phase's number), the
arrivals its phase still waits for, the arrivals each phase expects, and the transaction bytes
still to land (raised by an arrive that expects them, lowered by the TMA copies completing on
it; PTX ISA, "mbarrier: Phase Completion"). A phase completes when both reach zero: the barrier
moves to the next phase and its arrivals start again. A wait for parity ``p`` passes when the
barrier's current phase has the other parity, so that the phase of parity ``p`` before it has
completed; it blocks the task of its threads otherwise (``tasks``), a deadlock being reported
with each barrier's state.

It reports, as ``async_protocol`` faults, a barrier used before its init or by a thread that
no ``Barrier`` separates from the init, and more arrivals than a phase expects; each thread
remembers the phases it has seen complete, so that reading what a TMA copy wrote before waiting
on its phase is a race (``tma``).
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
        self.init_thread = torch.full((slots,), -1)
        self.expected = torch.zeros(slots, dtype=torch.int64)
        self.pending = torch.zeros(slots, dtype=torch.int64)
        self.transaction_bytes = torch.zeros(slots, dtype=torch.int64)
        self.phase = torch.zeros(slots, dtype=torch.int64)
        self.seen = torch.zeros((grid.total, max(count, 1)), dtype=torch.int64)
        """Per thread and barrier of its block: the phases it has seen complete (by a wait)."""

    def build(self, s, scope) -> Runner:
        site = next(self.sites)
        slots_of = self._slots_of(s.barrier, s.index, scope, site)
        if isinstance(s, kernel_ir.MbarrierInit):
            return lambda mask: self._init(slots_of(mask), s.arrivals)
        if isinstance(s, kernel_ir.MbarrierArrive):
            return lambda mask: self._arrive(slots_of(mask), s.transaction_bytes, site)
        parity_of = self.exprs.compile(s.parity, scope)
        return lambda mask: self._wait(slots_of(mask), parity_of(mask), site)

    def slots(self, barrier: str, index: tuple, scope, site: int) -> Callable[[Mask], tuple]:
        """For a TMA copy: the running threads and the slot of the barrier each names."""
        return self._slots_of(barrier, index, scope, site)

    def barrier(self, blocks: torch.Tensor | None) -> None:
        """A ``Barrier`` of ``blocks`` (all when None): their inits are visible to all their threads."""
        if blocks is None:
            self.visible.copy_(self.initialised)
        else:
            view = self.visible.view(self.grid.blocks, -1)
            view.index_copy_(0, blocks, self.initialised.view(self.grid.blocks, -1).index_select(0, blocks))

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

    def _init(self, found, arrivals: int) -> None:
        threads, slots, _ = found
        self.initialised.index_fill_(0, slots, True)
        self.visible.index_fill_(0, slots, False)
        self.init_thread.index_copy_(0, slots, self.grid.local_id.index_select(0, threads))
        for state, value in ((self.expected, arrivals), (self.pending, arrivals), (self.transaction_bytes, 0),
                             (self.phase, 0)):
            state.index_fill_(0, slots, value)

    def usable(self, threads: torch.Tensor, slots: torch.Tensor, site: int, verb: str) -> torch.Tensor:
        """Which of the threads may use their barrier: initialised, and the init seen through a ``Barrier``."""
        local = self.grid.local_id.index_select(0, threads)
        initialised = self.initialised.index_select(0, slots)
        unseen = initialised & ~self.visible.index_select(0, slots) & (self.init_thread.index_select(0, slots) != local)
        self.faults.add(ASYNC_PROTOCOL, (site, "init"), ~initialised, lambda i: (
            f"{verb} {self.describe(int(slots[i]))} by {self.grid.describe_thread(int(threads[i]))} before its init"))
        self.faults.add(ASYNC_PROTOCOL, (site, "unseen"), unseen, lambda i: (
            f"{verb} {self.describe(int(slots[i]))} by {self.grid.describe_thread(int(threads[i]))}, with no barrier "
            f"since {self.grid.describe_local(int(self.init_thread[slots[i]]))} initialised it: put a Barrier after "
            "the init"))
        return initialised

    def _arrive(self, found, transaction_bytes: int, site: int) -> None:
        threads, slots, _ = found
        slots = slots[self.usable(threads, slots, site, "arrive on")]
        if not slots.numel():
            return
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

    def complete_transaction(self, slot: int, count: int) -> None:
        """A TMA copy's ``count`` bytes landed on barrier ``slot``, in its current phase."""
        self.transaction_bytes[slot] -= count
        self._complete()

    def _complete(self) -> None:
        done = self.initialised & (self.pending == 0) & (self.transaction_bytes == 0)
        if not bool(done.any()):
            return
        self.phase += done.to(torch.int64)
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
        seen.index_copy_(0, at, torch.maximum(seen.index_select(0, at), self.phase.index_select(0, slots)))

    # --- words for people -----------------------------------------------------

    def describe(self, slot: int) -> str:
        block, within = divmod(slot, self.per_block)
        name = max((n for n in self.first if self.first[n] <= within), key=lambda n: self.first[n])
        flat, index = within - self.first[name], []
        for extent in reversed(self.shapes[name]):
            flat, position = divmod(flat, extent)
            index.append(position)
        return f"mbarrier {name}{''.join(f'[{n}]' for n in reversed(index))} of {self.grid.describe_block(block)}"

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

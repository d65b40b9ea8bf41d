"""Groups of ``cp.async`` copies, per thread, and the copies still in flight.

A copy writes its destination at once but stays pending until a wait completes its group.
``wait(n)`` completes all of a thread's committed groups but the ``n`` most recent. As with
PTX's ``cp.async.wait_group``, which the CUDA backend emits, copies not yet committed
belong to no group and no wait completes them: a kernel must commit before it waits.
"""

from __future__ import annotations

import attrs
import torch

from lamina.backends.reference.simulator.grid import Mask, ThreadGrid
from lamina.backends.reference.simulator.shared import Lanes, SharedArray, select_lanes


@attrs.define
class _Copy:
    id: int
    array: SharedArray
    lanes: Lanes
    group: torch.Tensor


class CpAsyncGroups:
    def __init__(self, grid: ThreadGrid):
        self.committed = torch.zeros(grid.total, dtype=torch.int64)
        self.in_flight: list[_Copy] = []
        self._next_id = 0

    def new_copy_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def issued(self, copy: int, array: SharedArray, lanes: Lanes) -> None:
        """Record copy ``copy`` into ``array``: one lane per element, in its thread's open group."""
        self.in_flight.append(_Copy(copy, array, lanes, self.committed.index_select(0, lanes.threads)))

    def commit(self, mask: Mask) -> None:
        if mask.full:
            self.committed += 1
        else:
            self.committed += mask.active.to(torch.int64)

    def wait(self, pending: int, mask: Mask) -> None:
        """Complete, for the threads of ``mask``, every committed group but the ``pending`` most recent."""
        boundary = self.committed - pending
        arrays = {id(copy.array): copy.array for copy in self.in_flight}
        still: list[_Copy] = []
        for copy in self.in_flight:
            threads = copy.lanes.threads
            done = copy.group < boundary.index_select(0, threads)
            if not mask.full:
                done &= mask.active.index_select(0, threads)
            if bool(done.all()):
                copy.array.complete_async(copy.lanes, copy.id)
                continue
            if bool(done.any()):
                copy.array.complete_async(select_lanes(copy.lanes, done), copy.id)
                keep = (~done).nonzero().squeeze(1)
                copy = _Copy(copy.id, copy.array, select_lanes(copy.lanes, ~done), copy.group.index_select(0, keep))
            still.append(copy)
        self.in_flight = still
        busy = {id(copy.array) for copy in still}
        for key, array in arrays.items():
            array.has_pending = key in busy

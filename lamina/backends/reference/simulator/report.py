"""What the Kernel IR simulator found: faults, one example per access site, and bank conflicts."""

from __future__ import annotations

from typing import Callable

import attrs
import torch

from lamina.core.errors import SimulationError

OUT_OF_BOUNDS = "out_of_bounds"
MISALIGNED = "misaligned"
UNWRITTEN_READS = "unwritten_reads"
RACES = "races"
ASYNC_PROTOCOL = "async_protocol"


@attrs.frozen
class SimulationReport:
    """Faults of one simulated launch, each message naming the first offending access of its
    site and how many accesses of that site did the same; bank conflicts are counts, not faults.

    ``races`` also holds reads of ``cp.async`` data before its wait, writes over pending
    copies, barriers that only part of a block reaches and writes to shared memory that a
    pending wgmma reads. ``async_protocol`` holds the other misuses of the asynchronous wgmma:
    operands written with no proxy fence, accumulators or registers of A touched with no
    ``WgmmaFence`` before the wgmma or no ``WgmmaWait`` after it, and a kernel that ends with a
    wgmma pending.
    """

    kernel: str
    out_of_bounds: list[str] = attrs.field(factory=list)
    unwritten_reads: list[str] = attrs.field(factory=list)
    races: list[str] = attrs.field(factory=list)
    misaligned: list[str] = attrs.field(factory=list)
    async_protocol: list[str] = attrs.field(factory=list)
    bank_conflicts: dict[str, int] = attrs.field(factory=dict)

    @property
    def faults(self) -> list[str]:
        return self.out_of_bounds + self.misaligned + self.unwritten_reads + self.races + self.async_protocol

    @property
    def total_bank_conflicts(self) -> int:
        return sum(self.bank_conflicts.values())

    def raise_for_faults(self) -> None:
        faults = self.faults
        if faults:
            raise SimulationError(
                f"the simulation of kernel {self.kernel} found {len(faults)} fault(s):\n  "
                + "\n  ".join(faults)
                + "\nOn a GPU this kernel would compute wrong results or crash: fix the schedule "
                "or kernel pass that produced it (print it with --ir kernel)."
            )

    def __str__(self) -> str:
        lines = [f"kernel {self.kernel}: {len(self.faults)} fault(s), "
                 f"{self.total_bank_conflicts} shared-memory bank conflict(s)"]
        lines += [f"  {message}" for message in self.faults]
        lines += [f"  bank conflicts on {name}: {count}" for name, count in self.bank_conflicts.items() if count]
        return "\n".join(lines)


class FaultLog:
    """Collects faults by site: the first example is described, the rest are counted."""

    def __init__(self, kernel: str):
        self.kernel = kernel
        self._sites: dict[tuple, list] = {}

    def add(self, category: str, site: tuple, bad: torch.Tensor, describe: Callable[[int], str]) -> bool:
        """Record the accesses flagged in ``bad`` (bool, one per lane); ``describe(lane)``
        words the first of them when this site has no example yet. Returns whether any was bad."""
        count = int(bad.sum())
        if not count:
            return False
        entry = self._sites.get((category, site))
        if entry is None:
            first = int(torch.argmax(bad.to(torch.uint8)))
            self._sites[(category, site)] = [f"kernel {self.kernel}: {describe(first)}", count]
        else:
            entry[1] += count
        return True

    def messages(self, category: str) -> list[str]:
        found = []
        for (kind, _), (message, count) in self._sites.items():
            if kind == category:
                found.append(message if count == 1 else f"{message}; {count} such accesses at this site")
        return found

    def report(self, bank_conflicts: dict[str, int]) -> SimulationReport:
        return SimulationReport(
            kernel=self.kernel,
            out_of_bounds=self.messages(OUT_OF_BOUNDS),
            unwritten_reads=self.messages(UNWRITTEN_READS),
            races=self.messages(RACES),
            misaligned=self.messages(MISALIGNED),
            async_protocol=self.messages(ASYNC_PROTOCOL),
            bank_conflicts=dict(bank_conflicts),
        )

"""Hopper's shared-memory barriers (``mbarrier``) as Kernel IR statements.

An mbarrier is a 64-bit object in shared memory: an element of a shared ``int64`` array that
only these statements touch (PTX ISA, "Parallel Synchronization and Communication
Instructions: mbarrier"). It counts down two things in its current *phase*: the arrivals still
pending (``MbarrierInit`` sets how many a phase expects) and the transaction bytes still to
land (``MbarrierArrive`` with ``transaction_bytes`` raises the count that the asynchronous
copies, ``TmaLoad``, lower as their data lands). When both reach zero the phase completes, the
barrier moves to the next phase and the arrivals start again from the count. A thread waits
for a phase by its parity (``MbarrierWait``): that is how a producer warp tells consumers that
a stage of shared memory is full, and the consumers tell the producer that it is empty again.
"""

from __future__ import annotations

import attrs

from lamina.core.ir.expr import Expr

MBARRIER_BYTES = 8
"""The size of one mbarrier object."""
MAX_TRANSACTION_BYTES = (1 << 20) - 1
"""The largest transaction count a phase may expect (PTX ISA, "tx-count" of the mbarrier object)."""


@attrs.frozen
class MbarrierInit:
    """Set mbarrier ``barrier[index]`` to phase 0, expecting ``arrivals`` arrivals per phase
    (``mbarrier.init.shared::cta.b64``). One thread initialises it; a ``Barrier`` must follow
    before any other thread uses it."""

    barrier: str
    index: tuple[Expr, ...] = attrs.field(converter=tuple)
    arrivals: int


@attrs.frozen
class MbarrierArrive:
    """Arrive on mbarrier ``barrier[index]`` (``mbarrier.arrive.shared::cta.b64``); with
    ``transaction_bytes``, first raise the bytes its current phase waits for by that many
    (``mbarrier.arrive.expect_tx``), the bytes that the copies completing on it will bring.

    With ``rank``, arrive instead on the same barrier of the block of that rank in the cluster
    (``mapa``, then ``mbarrier.arrive.shared::cluster.b64``, released at the block's scope): how a block tells
    the others of its cluster that it has finished reading what their copies multicast to it.
    Such an arrival expects no bytes."""

    barrier: str
    index: tuple[Expr, ...] = attrs.field(converter=tuple)
    transaction_bytes: int = 0
    rank: Expr | None = None


@attrs.frozen
class MbarrierWait:
    """Wait until the phase of mbarrier ``barrier[index]`` whose parity is ``parity`` (0 or 1)
    has completed (``mbarrier.try_wait.parity`` in a loop): it returns at once while the barrier
    is in the phase after it, and blocks while the barrier is in that phase. Shared memory that
    the copies of a phase wrote may be read only after a wait on that phase."""

    barrier: str
    index: tuple[Expr, ...] = attrs.field(converter=tuple)
    parity: Expr


MBARRIER_STATEMENTS = (MbarrierInit, MbarrierArrive, MbarrierWait)

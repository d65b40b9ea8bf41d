"""Hopper's warpgroup mma (``Wgmma``) and its asynchronous protocol in the Kernel IR simulator.

A warpgroup is 128 consecutive threads of a block (``threadIdx`` flattened). Its wgmma runs
at issue: A and B are read through their shared arrays, the reads spread over the
warpgroup's threads, so that bounds, unwritten reads, races, ``cp.async`` waits and the
mbarrier phases of TMA copies are checked as for any read (bank conflicts are not counted:
the tensor cores read whole swizzled rows), or A from each thread's registers as ``MmaTf32``
lays them out; then, as for ``MmaTf32``, float32 operands lose their low 13 bits (tf32), bf16
and fp16 ones are taken exactly, and the product is added in float64 and rounded once to
float32.

On the GPU it runs asynchronously, so the simulator keeps what a program may not do
meanwhile, and reports as ``async_protocol`` faults:
- a wgmma that reads shared memory that an ordinary store, or a ``cp.async`` once waited
  for, wrote with no ``AsyncProxyFence`` by the writing thread since: the tensor cores read
  through the async proxy, which does not see those writes otherwise;
- a wgmma whose accumulators, or registers of A, an ordinary statement accessed since the
  thread's last ``WgmmaFence``;
- an ordinary access to the accumulators or registers of A of a wgmma still pending, and a
  kernel that ends with one pending. ``WgmmaCommit`` closes a thread's open group,
  ``WgmmaWait(p)`` completes all its committed groups but the ``p`` newest, and a wgmma not
  yet committed is pending;
and, as a race, a write to shared memory that a pending wgmma reads.
"""

from __future__ import annotations

from typing import Callable

import attrs
import torch

from lamina.backends.reference.scalar_ops import torch_dtype
from lamina.backends.reference.simulator.expressions import ExpressionCompiler
from lamina.backends.reference.simulator.grid import Mask, ThreadGrid
from lamina.backends.reference.simulator.memory import (
    RegisterArray,
    as_index,
    format_index,
    linear_index,
    out_of_bounds,
    per_thread,
)
from lamina.backends.reference.simulator.report import ASYNC_PROTOCOL, RACES, FaultLog
from lamina.backends.reference.simulator.shared import Lanes, SharedArray
from lamina.backends.reference.tf32 import truncated
from lamina.core.errors import SimulationError, VerificationError
from lamina.core.ir import dtypes, kernel_ir
from lamina.core.ir.dtypes import DType
from lamina.core.ir.kernel_ir import WARPGROUP_SIZE, WGMMA_M, wgmma_k

Runner = Callable[[Mask], None]


class WgmmaGroups:
    """Each thread's wgmma groups, numbered from 0 in the order it opens them: ``committed``
    counts its ``WgmmaCommit`` (the number of its open group), and its groups below
    ``completed`` are done. A wgmma joins its thread's open group, so it is pending until a
    wait after its commit."""

    def __init__(self, total: int):
        self.committed = torch.zeros(total, dtype=torch.int64)
        self.completed = torch.zeros(total, dtype=torch.int64)

    def commit(self, mask: Mask) -> None:
        self.committed += 1 if mask.full else mask.active.to(torch.int64)

    def wait(self, pending: int, mask: Mask) -> None:
        """Complete, for the threads of ``mask``, every committed group but the ``pending`` newest."""
        reached = torch.maximum(self.completed, self.committed - pending)
        self.completed.copy_(reached if mask.full else torch.where(mask.active, reached, self.completed))

    def pending(self, group: torch.Tensor, threads: torch.Tensor) -> torch.Tensor:
        """Whether group ``group[i]`` of thread ``threads[i]`` still runs (never, for group -1)."""
        return group >= self.completed.index_select(0, threads)


@attrs.define
class _WatchedRegisters:
    """Per thread and element ([threads, elements]) of a register array that wgmma accumulate
    into or read A from: whether an ordinary statement accessed it since the thread's last
    ``WgmmaFence``, the group of the last wgmma that uses it (-1 for none) and that wgmma (its
    number)."""

    array: RegisterArray
    touched: torch.Tensor
    group: torch.Tensor
    wgmma: torch.Tensor


class RegisterWatch:
    """The register side of the protocol, for accumulators and registers of A alike: a fence
    between ordinary accesses to them and the wgmma that follow, a wait between a wgmma and the
    ordinary accesses that follow."""

    def __init__(self, grid: ThreadGrid, faults: FaultLog, groups: WgmmaGroups):
        self.grid, self.faults, self.groups = grid, faults, groups
        self.arrays: dict[str, _WatchedRegisters] = {}
        self.texts: list[str] = []

    def watch(self, array: RegisterArray, text: str) -> int:
        """Follow the accesses to ``array``, which wgmma ``text`` accumulates into or reads A from;
        returns the wgmma's number."""
        if array.name not in self.arrays:
            shape = (self.grid.total, array.numel)
            self.arrays[array.name] = _WatchedRegisters(array, torch.zeros(shape, dtype=torch.bool),
                                                    torch.full(shape, -1, dtype=torch.int32),
                                                    torch.zeros(shape, dtype=torch.int32))
            array.watch = self.accessed
        self.texts.append(text)
        return len(self.texts) - 1

    def accessed(self, array: RegisterArray, flat: torch.Tensor, valid: Mask, site: int, verb: str) -> None:
        """An ordinary access (``RegisterArray.watch``): the next wgmma needs a fence after it, and
        it must not touch what a pending wgmma writes or reads."""
        acc = self.arrays[array.name]
        threads, cells = self._cells(array, flat, valid)
        acc.touched.view(-1).index_fill_(0, cells, True)
        pending = self.groups.pending(acc.group.view(-1).index_select(0, cells), threads)
        self.faults.add(ASYNC_PROTOCOL, (site, "pending"), pending, lambda i: (
            f"{verb} {_register(array, cells, i)} by {self.grid.describe_thread(int(threads[i]))} while "
            f"`{self.texts[int(acc.wgmma.view(-1)[cells[i]])]}`, which uses it, is still pending: commit the "
            "wgmma (WgmmaCommit) and wait for its group (WgmmaWait) before touching its registers"))

    def fence(self, mask: Mask) -> None:
        """``WgmmaFence``: the threads' accesses so far are ordered before their next wgmma."""
        for acc in self.arrays.values():
            if mask.full:
                acc.touched.fill_(False)
            else:
                acc.touched[mask.active] = False

    def issue(self, array: RegisterArray, places: list[list[torch.Tensor]], mask: Mask, site: int,
              wgmma: int, verb: str = "accumulates into") -> None:
        """Wgmma number ``wgmma`` writes (or, as A, reads) elements ``places`` of ``array`` in the
        threads of ``mask``: fault those that an ordinary statement touched since the fence, and
        mark them pending."""
        acc = self.arrays[array.name]
        found = [self._cells(array, linear_index(place, array.shape), _inside(place, array.shape, mask))
                 for place in places]
        threads = torch.cat([threads for threads, _ in found])
        cells = torch.cat([cells for _, cells in found])
        touched = acc.touched.view(-1).index_select(0, cells)
        self.faults.add(ASYNC_PROTOCOL, (site, "fence"), touched, lambda i: (
            f"`{self.texts[wgmma]}` by {self.grid.describe_thread(int(threads[i]))} {verb} "
            f"{_register(array, cells, i)}, which an ordinary statement accessed since the thread's last "
            "WgmmaFence: put a WgmmaFence between that access and the wgmma, or the tensor cores may not see it"))
        acc.group.view(-1).index_copy_(0, cells, self.groups.committed.index_select(0, threads).int())
        acc.wgmma.view(-1).index_fill_(0, cells, wgmma)

    def check_finished(self, site: int) -> None:
        """At the end of the kernel: every wgmma must have been waited for."""
        for acc in self.arrays.values():
            pending = acc.group >= self.groups.completed.unsqueeze(1)
            self.faults.add(ASYNC_PROTOCOL, (site, "end", acc.array.name), pending.any(1), lambda thread: (
                f"the kernel ends while `{self.texts[int(acc.wgmma[thread][pending[thread]][0])]}` of "
                f"{self.grid.describe_thread(thread)} is still pending: wait for every wgmma (WgmmaCommit, "
                "then WgmmaWait(0)) before the kernel ends"))

    def _cells(self, array: RegisterArray, flat: torch.Tensor, valid: Mask) -> tuple[torch.Tensor, torch.Tensor]:
        """The threads of ``valid``, and where their element ``flat`` is in the [threads, elements] state."""
        flat = per_thread(as_index(flat), self.grid.total)
        if valid.full:
            threads = self.grid.thread_ids
        else:
            threads = valid.active.nonzero().squeeze(1)
            flat = flat.index_select(0, threads)
        return threads, threads * array.numel + flat


def _inside(place: list[torch.Tensor], shape: tuple[int, ...], mask: Mask) -> Mask:
    """The threads of ``mask`` whose register index is in bounds (the access reports the others)."""
    bad = out_of_bounds(place, shape, mask)
    return mask if bad is None else Mask(mask.active & ~bad)


def _register(array: RegisterArray, cells: torch.Tensor, i: int) -> str:
    flat, index = int(cells[i]) % array.numel, []
    for extent in reversed(array.shape):
        flat, position = divmod(flat, extent)
        index.append(position)
    return f"register {array.name}" + "".join(f"[{n}]" for n in reversed(index))


@attrs.define
class _Read:
    """Elements of a shared array that a pending wgmma reads, each counted for one thread of its
    warpgroup (``readers``, grid-wide), with that thread's group."""

    array: SharedArray
    elements: torch.Tensor
    readers: torch.Tensor
    group: torch.Tensor
    text: str


class AsyncProxy:
    """The shared-memory side of the protocol: a fence after the writes that a wgmma reads, and
    no writes while it reads. Per element of an array that wgmma read: the thread whose write no
    ``AsyncProxyFence`` covers yet (-1 for none), and how many pending wgmma read it."""

    def __init__(self, grid: ThreadGrid, faults: FaultLog, groups: WgmmaGroups):
        self.grid, self.faults, self.groups = grid, faults, groups
        self.unfenced: dict[str, torch.Tensor] = {}
        self.readers: dict[str, torch.Tensor] = {}
        self.reads: list[_Read] = []

    def watch(self, array: SharedArray) -> None:
        if array.name in self.unfenced:
            return
        size = array.data.numel()
        self.unfenced[array.name] = torch.full((size,), -1)
        self.readers[array.name] = torch.zeros(size, dtype=torch.int64)
        array.async_proxy = self

    def stored(self, array: SharedArray, elements: torch.Tensor, threads: torch.Tensor) -> None:
        """(``SharedArray.async_proxy``) ``threads`` wrote ``elements``, unseen by the async proxy so far."""
        self.unfenced[array.name].index_copy_(0, elements, threads)

    def overwriting(self, array: SharedArray, lanes: Lanes, site: int, how: str) -> None:
        """(``SharedArray.async_proxy``) a write is about to land: no pending wgmma may read there."""
        if not self.reads:
            return
        reading = self.readers[array.name].index_select(0, lanes.elements) > 0
        self.faults.add(RACES, (site, "wgmma"), reading, lambda i: (
            f"{array.describe_element(lanes, i)} {how} by {self.grid.describe_local(int(lanes.local[i]))} while "
            f"`{self._reader(array, lanes.elements[i])}` still reads it: wait for that wgmma (WgmmaWait) "
            "before overwriting its operands"))

    def fence(self, mask: Mask) -> None:
        """``AsyncProxyFence``: the threads' writes so far become visible to the async proxy."""
        for unfenced in self.unfenced.values():
            if mask.full:
                unfenced.fill_(-1)
            else:
                unfenced.masked_fill_(mask.active.index_select(0, unfenced.clamp(min=0)) & (unfenced >= 0), -1)

    def read(self, array: SharedArray, lanes: Lanes, site: int, text: str) -> None:
        """Wgmma ``text`` reads the elements of ``lanes``: fault those whose write is not fenced,
        and keep the reads until the wgmma is done."""
        writer = self.unfenced[array.name].index_select(0, lanes.elements)
        grid = self.grid

        def describe(i: int) -> str:
            reader, writing = int(lanes.local[i]), int(writer[i]) % grid.threads_per_block
            return (f"`{text}` of the warpgroup of {grid.describe_local(reader - reader % WARPGROUP_SIZE)} reads "
                    f"{array.describe_element(lanes, i)}, which {grid.describe_local(writing)} wrote with no "
                    "AsyncProxyFence since: the tensor cores read through the async proxy, which may not see the "
                    "write; put an AsyncProxyFence after the writes, before the barrier")

        self.faults.add(ASYNC_PROTOCOL, (site, "proxy"), writer >= 0, describe)
        self.readers[array.name].index_add_(0, lanes.elements, torch.ones_like(lanes.elements))
        group = self.groups.committed.index_select(0, lanes.threads)
        self.reads.append(_Read(array, lanes.elements, lanes.threads, group, text))

    def retire(self) -> None:
        """After a wait: forget the reads of the wgmma that are done."""
        still = []
        for read in self.reads:
            pending = self.groups.pending(read.group, read.readers)
            if not bool(pending.all()):
                done = read.elements[~pending]
                self.readers[read.array.name].index_add_(0, done, torch.full_like(done, -1))
                read = _Read(read.array, read.elements[pending], read.readers[pending], read.group[pending], read.text)
            if read.elements.numel():
                still.append(read)
        self.reads = still

    def _reader(self, array: SharedArray, element: torch.Tensor) -> str:
        return next(read.text for read in self.reads if read.array is array and bool((read.elements == element).any()))


class _Operand:
    """A or B of one wgmma statement: ``rows`` rows of k elements (8 tf32, 16 bf16 or fp16) of a
    shared array from the (row, column) that each warpgroup gives, read through the array with
    element ``128 q + i`` (row-major) counted for thread ``i`` of the warpgroup. Each of the rounds
    ``q`` holds every thread's offsets from the index's last axes, and which threads read (None for
    all). An ``n_major`` B lies along its rows instead: row ``j`` and column ``kk`` of the operand
    are at (panel + j // 64, k + kk, j % 64) of the array's last three axes."""

    def __init__(self, runner: WgmmaRunner, name: str, index: tuple, rows: int, scope: dict[str, DType], text: str,
                 operand_dtype: DType = dtypes.float32, n_major: bool = False):
        memory = runner.exprs.memory(name, len(index), "wgmma read of")
        rank = 3 if n_major else 2
        if not isinstance(memory, SharedArray) or memory.dtype != operand_dtype or len(memory.shape) < rank:
            raise VerificationError(f"kernel {runner.kernel}: wgmma reads {name}, which is not a {operand_dtype} shared "
                                    f"array of rank {rank} or more")
        runner.proxy.watch(memory)
        self.runner, self.memory, self.name, self.rows, self.text = runner, memory, name, rows, text
        self.tf32 = operand_dtype == dtypes.float32
        self.k = k = wgmma_k(operand_dtype)
        self.index_of = [runner.exprs.compile(i, scope) for i in index]
        self.site = next(runner.sites)
        self.warpgroups = runner.grid.total // WARPGROUP_SIZE
        slot, count = runner.grid.local_id % WARPGROUP_SIZE, rows * k
        self.rounds = []
        for first in range(0, count, WARPGROUP_SIZE):
            element = slot + first
            within = element < count if first + WARPGROUP_SIZE > count else None
            row, column = element // k, element % k
            if n_major:
                steps = (row // kernel_ir.SWIZZLE_PANEL, column, row % kernel_ir.SWIZZLE_PANEL)
            else:
                steps = (row, column)
            self.rounds.append((steps, within))

    def read(self, mask: Mask) -> torch.Tensor:
        """The operand of each warpgroup, [warpgroups, rows, k], as the tensor cores read it (tf32 of
        float32, bf16 and fp16 as they are), in float64; zeros for a warpgroup that does not run."""
        index = [f(mask) for f in self.index_of]
        self._check(index, mask)
        moved = len(self.rounds[0][0])
        leading, starts = index[:-moved], [as_index(i) for i in index[-moved:]]
        values = []
        for steps, within in self.rounds:
            reading = mask if within is None else mask.narrow(within)
            place = [start + step for start, step in zip(starts, steps)]
            value, lanes = self.memory.read_uncounted(leading + place, reading, self.site, "wgmma read of")
            if lanes is not None:
                self.runner.proxy.read(self.memory, lanes, self.site, self.text)
            values.append(value)
        spread = torch.stack(values, 1).view(self.warpgroups, WARPGROUP_SIZE, len(values)).transpose(1, 2)
        tiles = spread.reshape(self.warpgroups, -1)[:, :self.rows * self.k]
        tiles = truncated(tiles) if self.tf32 else tiles
        return tiles.reshape(self.warpgroups, self.rows, self.k).double()

    def _check(self, index: list[torch.Tensor], mask: Mask) -> None:
        """Every thread of a warpgroup gives the same index, whose row and column are multiples of 8."""
        kernel, grid = self.runner.kernel, self.runner.grid
        running = mask.active.reshape(-1, WARPGROUP_SIZE).any(1)
        for value in index:
            if value.dim() == 0:
                continue
            spread = value.reshape(-1, WARPGROUP_SIZE)
            differs = (spread != spread[:, :1]).any(1) & running
            if bool(differs.any()):
                group = int(differs.nonzero()[0])
                first = group * WARPGROUP_SIZE
                other = first + int((spread[group] != spread[group, 0]).nonzero()[0])
                raise SimulationError(
                    f"kernel {kernel}: `{self.text}`: {grid.describe_thread(first)} reads {self.name} at "
                    f"{format_index(index, first)} but {grid.describe_local(other % grid.threads_per_block)} of its "
                    f"warpgroup at {format_index(index, other)}; every thread of a warpgroup gives the same "
                    "operand index")
        misaligned = per_thread((as_index(index[-2]) % 8 != 0) | (as_index(index[-1]) % 8 != 0), grid.total)
        misaligned = misaligned & mask.active
        if bool(misaligned.any()):
            thread = int(misaligned.nonzero()[0])
            raise SimulationError(
                f"kernel {kernel}: `{self.text}` in the warpgroup of {grid.describe_thread(thread)} reads "
                f"{self.name} from {self.name}{format_index(index, thread)}; a wgmma operand starts at a row and a "
                "column that are multiples of 8, where the swizzle's 8-row pattern and the tensor cores' slices of "
                "k begin: fix the operand's index")


class _RegisterOperand:
    """A of a ``Wgmma`` from registers: four 32-bit elements of register arrays per thread (f32
    for tf32, int32 words of two 16-bit elements else), read as the tensor cores read them and
    watched like the accumulators until the wgmma is done."""

    def __init__(self, runner: WgmmaRunner, values: tuple, scope: dict[str, DType], text: str,
                 operand_dtype: DType):
        self.runner, self.sources, self.operand_dtype = runner, [], operand_dtype
        held = kernel_ir.register_dtype(operand_dtype)
        for value in values:
            memory = runner.memories.get(value.array) if isinstance(value, kernel_ir.Load) else None
            if not isinstance(memory, RegisterArray) or memory.dtype != held:
                raise VerificationError(f"kernel {runner.kernel}: `{text}` reads A from "
                                        f"{kernel_ir.format_expr(value)}, which is not an element of an {held.short} "
                                        "register array")
            self.sources.append((memory, [runner.exprs.compile(i, scope) for i in value.index]))
        self.site = next(runner.sites)
        self.wgmmas = [runner.registers.watch(memory, text) for memory, _ in self.sources]
        self.k = kernel_ir.wgmma_k(operand_dtype)
        thread = torch.arange(WARPGROUP_SIZE)
        warp, g, t = thread // 32, thread % 32 // 4, thread % 4
        rows = [(16 * warp + g + 8 * (i % 2)) * self.k for i in range(4)]
        if operand_dtype == dtypes.float32:
            self.places = [[row + t + 4 * (i // 2)] for i, row in enumerate(rows)]
        else:  # the word's two elements, side by side along k
            self.places = [[row + 2 * t + e + 8 * (i // 2) for e in range(2)] for i, row in enumerate(rows)]

    def read(self, mask: Mask) -> torch.Tensor:
        """A of each warpgroup, [warpgroups, 64, k], in float64, its registers marked pending."""
        grid = self.runner.grid
        warpgroups = grid.total // WARPGROUP_SIZE
        matrix = torch.zeros(warpgroups, WGMMA_M * self.k, dtype=torch.float64)
        for (memory, index_of), places, wgmma in zip(self.sources, self.places, self.wgmmas):
            index = [f(mask) for f in index_of]
            values = per_thread(memory.read(index, mask, self.site, watched=False), grid.total)
            if self.operand_dtype == dtypes.float32:
                elements = [truncated(values.float()).double()]
            else:
                halves = values.to(torch.int32).contiguous().view(torch_dtype(self.operand_dtype)).view(-1, 2)
                elements = [halves[:, e].double() for e in range(2)]
            for place, element in zip(places, elements):
                matrix[:, place] = element.view(warpgroups, WARPGROUP_SIZE)
            self.runner.registers.issue(memory, [index], mask, self.site, wgmma, "reads A from")
        return matrix.view(warpgroups, WGMMA_M, self.k)


def _accumulator_layout(n: int) -> torch.Tensor:
    """Where each accumulator of a warpgroup's threads sits in D (64 x n, row-major), thread-major:
    lane ``4 g + t`` of warp ``w`` holds ``D[16 w + g + 8 h][8 j + 2 t + e]`` in element ``4 j + 2 h + e``."""
    thread, place = torch.arange(WARPGROUP_SIZE).unsqueeze(1), torch.arange(n // 2)
    warp, g, t = thread // 32, thread % 32 // 4, thread % 4
    j, h, e = place // 4, place % 4 // 2, place % 2
    return ((16 * warp + g + 8 * h) * n + 8 * j + 2 * t + e).reshape(-1)


class WgmmaRunner:
    """Builds the runners of a kernel's wgmma, of their fences, commits and waits, and of
    ``AsyncProxyFence``, and keeps the state of their protocol."""

    def __init__(self, kernel: str, grid: ThreadGrid, faults: FaultLog, exprs: ExpressionCompiler, memories: dict,
                 sites):
        self.kernel, self.grid, self.exprs, self.memories, self.sites = kernel, grid, exprs, memories, sites
        self.groups = WgmmaGroups(grid.total)
        self.registers = RegisterWatch(grid, faults, self.groups)
        self.proxy = AsyncProxy(grid, faults, self.groups)

    def build(self, s, scope: dict[str, DType]) -> Runner:
        """The runner of ``s``: a ``WgmmaTf32``, ``WgmmaFence``, ``WgmmaCommit``, ``WgmmaWait`` or
        ``AsyncProxyFence``."""
        if isinstance(s, kernel_ir.WgmmaFence):
            return self.registers.fence
        if isinstance(s, kernel_ir.WgmmaCommit):
            return self.groups.commit
        if isinstance(s, kernel_ir.WgmmaWait):
            return self._wait(s.pending)
        if isinstance(s, kernel_ir.AsyncProxyFence):
            return self.proxy.fence
        return self._wgmma(s, scope)

    def finish(self, site: int) -> None:
        """At the end of the kernel: a wgmma still pending is a fault."""
        self.registers.check_finished(site)

    def _wait(self, pending: int) -> Runner:
        groups, proxy = self.groups, self.proxy

        def run(mask: Mask) -> None:
            groups.wait(pending, mask)
            proxy.retire()

        return run

    def _wgmma(self, s: kernel_ir.Wgmma, scope: dict[str, DType]) -> Runner:
        acc = self.memories.get(s.acc)
        if not isinstance(acc, RegisterArray) or acc.dtype != dtypes.float32:
            raise VerificationError(f"kernel {self.kernel}: wgmma accumulates into {s.acc}, which is not an f32 "
                                    "register array")
        if s.n % 8 or not 8 <= s.n <= 256 or len(s.acc_index) != s.n // 2:
            raise VerificationError(f"kernel {self.kernel}: wgmma m64n{s.n}k{s.k} with {len(s.acc_index)} accumulators "
                                    "per thread; n is a multiple of 8 from 8 to 256, with n / 2 accumulators")
        if self.grid.threads_per_block % WARPGROUP_SIZE:
            raise SimulationError(f"kernel {self.kernel}: wgmma in blocks of {self.grid.threads_per_block} threads; "
                                  f"a wgmma needs blocks of whole warpgroups of {WARPGROUP_SIZE} threads")
        text = kernel_ir.format_body((s,), "")[0]
        if s.a_from == "registers":
            a = _RegisterOperand(self, s.a, scope, text, s.operand_dtype)
        else:
            a = _Operand(self, s.a, s.a_index, WGMMA_M, scope, text, s.operand_dtype)
        if s.b_layout == kernel_ir.N_MAJOR and s.operand_dtype == dtypes.float32:
            raise VerificationError(f"kernel {self.kernel}: `{text}` reads tf32 B n-major; only 16-bit wgmma do")
        b = _Operand(self, s.b, s.b_index, s.n, scope, text, s.operand_dtype, s.b_layout == kernel_ir.N_MAJOR)
        places = [[self.exprs.compile(i, scope) for i in place] for place in s.acc_index]
        wgmma = self.registers.watch(acc, text)
        site, layout, accumulate, n = next(self.sites), _accumulator_layout(s.n), s.accumulate, s.n
        total, warpgroups = self.grid.total, self.grid.total // WARPGROUP_SIZE

        def run(mask: Mask) -> None:
            self._whole_warpgroups(mask, text)
            product = a.read(mask) @ b.read(mask).transpose(1, 2)
            indices = [[f(mask) for f in place] for place in places]
            self.registers.issue(acc, indices, mask, site, wgmma)
            if accumulate:
                held = torch.stack([acc.read(i, mask, site, watched=False) for i in indices], 1)
                d = torch.zeros(warpgroups, WGMMA_M * n, dtype=torch.float64)
                product += d.index_copy_(1, layout, held.view(warpgroups, -1).double()).view(warpgroups, WGMMA_M, n)
            result = product.reshape(warpgroups, -1).index_select(1, layout).view(total, -1).float()
            for p, index in enumerate(indices):
                acc.write(index, result[:, p], mask, site, watched=False)

        return run

    def _whole_warpgroups(self, mask: Mask, text: str) -> None:
        """A wgmma that only part of a warpgroup runs is an error: the tensor cores take every
        thread's accumulators, and the GPU would hang or compute garbage."""
        if mask.full:
            return
        running = mask.active.reshape(-1, WARPGROUP_SIZE).sum(1)
        partial = (running > 0) & (running < WARPGROUP_SIZE)
        if bool(partial.any()):
            group = int(partial.nonzero()[0])
            raise SimulationError(
                f"kernel {self.kernel}: `{text}` runs in only part of the warpgroup of "
                f"{self.grid.describe_thread(group * WARPGROUP_SIZE)} ({int(running[group])} of its {WARPGROUP_SIZE} "
                "threads); every thread of a warpgroup must run a wgmma, never under a branch that only some take")

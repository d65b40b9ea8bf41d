"""The Kernel IR simulator: runs a kernel's whole grid on the CPU and checks how it uses memory.

Every thread of every block runs in lockstep, vectorised: a per-thread value is a tensor
with one element per thread of the grid, a uniform one a 0-d tensor; loop variables are
uniform, since Kernel IR loop bounds are the same for every running thread. ``If``
narrows the mask of running threads instead of branching. The kernel is first turned
into closures (one per statement and expression), so that loops cost no re-analysis.

It reports, as faults: accesses out of bounds, misaligned wide ``cp.async`` copies and
vector accesses (see ``vectors``), reads of shared memory that no thread wrote,
races on shared memory between two barriers (and between the blocks of a cluster, across
cluster barriers), reads of ``cp.async`` data before its wait, barriers that only part
of a block (or cluster) reaches, and misuses of the asynchronous warpgroup mma: operands
written with no proxy fence, accumulators or registers of A touched with no ``WgmmaFence``
before it or no ``WgmmaWait`` after it, shared memory overwritten while it reads, and a kernel that ends with
one pending (see ``wgmma``). A warp-wide mma that only part of a warp runs, and a
wgmma that only part of a warpgroup runs or whose threads disagree on its operands, are
errors (see ``mma`` and ``wgmma``).
Shared-memory bank conflicts are counted per array (see ``banks``), where a
swizzled array stores its elements. Hopper's mbarriers and TMA copies are in ``mbarriers``
and ``tma``; a kernel that waits on mbarriers runs the branches of an ``If`` that wait as
tasks that wait for each other (``tasks``).
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Callable, Iterator, Mapping

import torch

from lamina.backends.reference.scalar_ops import as_tensor, torch_dtype
from lamina.backends.reference.simulator.cp_async import CpAsyncGroups
from lamina.backends.reference.simulator.expressions import ExpressionCompiler
from lamina.backends.reference.simulator.grid import Mask, ThreadGrid
from lamina.backends.reference.simulator.memory import GlobalArray, RegisterArray, as_index, per_thread
from lamina.backends.reference.simulator.mbarriers import Mbarriers
from lamina.backends.reference.simulator.mma import MmaRunner
from lamina.backends.reference.simulator.report import MISALIGNED, RACES, FaultLog, SimulationReport
from lamina.backends.reference.simulator.shared import Lanes, SharedArray
from lamina.backends.reference.simulator.tasks import Tasks, TaskVariables
from lamina.backends.reference.simulator.tma import TmaCopies
from lamina.backends.reference.simulator.vectors import VectorAccesses
from lamina.backends.reference.simulator.wgmma import WgmmaRunner
from lamina.core.errors import SimulationError, VerificationError
from lamina.core.ir import dtypes, kernel_ir
from lamina.core.ir.dtypes import DType

Runner = Callable[[Mask], None]
_WGMMA_STATEMENTS = (kernel_ir.Wgmma, kernel_ir.WgmmaFence, kernel_ir.WgmmaCommit, kernel_ir.WgmmaWait,
                     kernel_ir.AsyncProxyFence)


def simulate(kernel: kernel_ir.Kernel, arrays: Mapping[str, torch.Tensor], *,
             raise_on_fault: bool = True) -> SimulationReport:
    """Run ``kernel`` over ``arrays`` (every parameter's name to a flat CPU tensor of its dtype
    and size; writable ones are updated in place) and report what went wrong.

    With ``raise_on_fault``, faults raise ``SimulationError`` after the run.
    """
    _check_arrays(kernel, arrays)
    with _one_intra_op_thread():
        report = KernelSimulation(kernel, arrays).run()
    if raise_on_fault:
        report.raise_for_faults()
    return report


@contextlib.contextmanager
def _one_intra_op_thread() -> Iterator[None]:
    """The simulator issues many small tensor operations: splitting them across threads
    saves little and, on a busy machine, each one can stall waiting for a descheduled thread."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _check_arrays(kernel: kernel_ir.Kernel, arrays: Mapping[str, torch.Tensor]) -> None:
    problems = []
    for param in kernel.params:
        tensor = arrays.get(param.name)
        if tensor is None:
            problems.append(f"parameter {param.name} has no tensor")
            continue
        if not isinstance(tensor, torch.Tensor):
            problems.append(f"parameter {param.name} is a {type(tensor).__name__}, not a tensor")
            continue
        if tensor.device.type != "cpu":
            problems.append(f"parameter {param.name} is on {tensor.device}; the simulator runs on CPU tensors")
        if tensor.dim() != 1 or tensor.numel() != param.numel:
            problems.append(f"parameter {param.name} has shape {tuple(tensor.shape)}; "
                            f"it must be flat with {param.numel} elements")
        if tensor.dtype != torch_dtype(param.dtype):
            problems.append(f"parameter {param.name} is {tensor.dtype}; the kernel declares {param.dtype.name}")
    if problems:
        raise SimulationError(f"cannot simulate kernel {kernel.name}:\n  " + "\n  ".join(problems)
                              + "\nPass every parameter as a flat contiguous CPU tensor of its declared dtype and size.")


class KernelSimulation:
    """One launch of a kernel: its memories, its compiled body, and what it found."""

    def __init__(self, kernel: kernel_ir.Kernel, arrays: Mapping[str, torch.Tensor]):
        self.kernel = kernel
        self.grid = ThreadGrid(kernel)
        self.faults = FaultLog(kernel.name)
        self.tasks = None
        if _waits(kernel.body):
            self.env = TaskVariables()
            self.tasks = Tasks(self.env, kernel.name)
        else:
            self.env: dict[str, torch.Tensor] = {}
        self.memories = self._memories(arrays)
        self.shared = [m for m in self.memories.values() if isinstance(m, SharedArray)]
        self.groups = CpAsyncGroups(self.grid)
        self.sites = itertools.count()
        self.exprs = ExpressionCompiler(kernel.name, self.grid, self.env, self.memories, self.sites)
        self.vectors = VectorAccesses(kernel.name, self.grid, self.faults, self.exprs, self.sites)
        self.mma = MmaRunner(kernel.name, self.grid, self.exprs, self.memories, self.sites)
        self.wgmma = WgmmaRunner(kernel.name, self.grid, self.faults, self.exprs, self.memories, self.sites)
        self.mbarriers = Mbarriers(kernel, self.grid, self.faults, self.exprs, self.sites, self.tasks)
        self.tma = TmaCopies(kernel, self.grid, self.faults, self.exprs, self.memories, self.sites, self.mbarriers,
                             self.wgmma.proxy)
        self.body = self._body(kernel.body, {}, set())

    def run(self) -> SimulationReport:
        if self.grid.total:
            self.body(Mask.everyone(self.grid.total))
        end = next(self.sites)
        for array in self.shared:
            array.check_cluster_reads_finished(end)
        self.wgmma.finish(end)
        self.tma.finish(end)
        self.mbarriers.finish(end)
        return self.faults.report({array.name: array.bank_conflicts for array in self.shared})

    def _memories(self, arrays: Mapping[str, torch.Tensor]) -> dict:
        memories: dict = {}
        for param in self.kernel.params:
            memories[param.name] = GlobalArray(param, arrays[param.name], self.grid, self.faults)
        for array in self.kernel.arrays:
            if array.name in memories:
                raise VerificationError(f"kernel {self.kernel.name}: two arrays are named {array.name}")
            if array.space == "shared":
                memories[array.name] = SharedArray(array, self.grid, self.faults)
            elif array.space == "register":
                memories[array.name] = RegisterArray(array, self.grid, self.faults)
            else:
                raise VerificationError(f"kernel {self.kernel.name}: array {array.name} is in space "
                                        f"{array.space!r}; arrays are shared or register")
        return memories

    def _fail(self, message: str) -> VerificationError:
        return VerificationError(f"kernel {self.kernel.name}: {message}")

    # --- statements -------------------------------------------------------------

    def _body(self, body: tuple, outer: Mapping[str, DType], loop_vars: set[str]) -> Runner:
        scope = dict(outer)
        runners = []
        declared = []
        for s in body:
            if isinstance(s, kernel_ir.Declare):
                declared.append(s.var)
            runner = self._statement(s, scope, loop_vars)
            if runner is not None:
                runners.append(runner)
        shadowed = [name for name in declared if name in outer]
        env = self.env

        def run(mask: Mask) -> None:
            saved = [(name, env[name]) for name in shadowed]
            for runner in runners:
                runner(mask)
            env.update(saved)

        return run

    def _statement(self, s, scope: dict[str, DType], loop_vars: set[str]) -> Runner | None:
        if isinstance(s, kernel_ir.Declare):
            runner = self._declare(s, scope)
            scope[s.var] = s.dtype
            return runner
        if isinstance(s, kernel_ir.Assign):
            return self._assign(s, scope, loop_vars)
        if isinstance(s, kernel_ir.Store):
            return self._store(s, scope)
        if isinstance(s, kernel_ir.For):
            return self._for(s, scope, loop_vars)
        if isinstance(s, kernel_ir.If):
            return self._if(s, scope, loop_vars)
        if isinstance(s, kernel_ir.Divergent):
            return self._divergent(s, scope, loop_vars)
        if isinstance(s, kernel_ir.Barrier):
            return self._barrier()
        if isinstance(s, kernel_ir.ClusterBarrier):
            return self._cluster_barrier()
        if isinstance(s, kernel_ir.CpAsync):
            return self._cp_async(s, scope)
        if isinstance(s, kernel_ir.CpAsyncCommit):
            return self.groups.commit
        if isinstance(s, kernel_ir.CpAsyncWait):
            pending, groups = s.pending, self.groups
            return lambda mask: groups.wait(pending, mask)
        if isinstance(s, kernel_ir.VectorLoad):
            return self.vectors.load(s, scope)
        if isinstance(s, kernel_ir.VectorStore):
            return self.vectors.store(s, scope)
        if isinstance(s, (kernel_ir.MmaTf32, kernel_ir.Mma16)):
            return self.mma.build(s, scope)
        if isinstance(s, _WGMMA_STATEMENTS):
            return self.wgmma.build(s, scope)
        if isinstance(s, kernel_ir.AtomicAdd):
            return self._atomic_add(s, scope)
        if isinstance(s, kernel_ir.MBARRIER_STATEMENTS):
            return self.mbarriers.build(s, scope)
        if isinstance(s, kernel_ir.TMA_STATEMENTS):
            return self.tma.build_statement(s, scope)
        if isinstance(s, (kernel_ir.Comment, kernel_ir.ThreadFence, kernel_ir.LetNextKernelLaunch,
                          kernel_ir.WaitForPreviousKernel)):
            return None
        raise self._fail(f"the simulator does not know the statement {s!r}")

    def _declare(self, s: kernel_ir.Declare, scope) -> Runner:
        env, name, dtype, total = self.env, s.var, s.dtype, self.grid.total
        if s.init is None:
            return lambda mask: env.__setitem__(name, torch.zeros(total, dtype=torch_dtype(dtype)))
        init = self.exprs.compile(s.init, scope)

        def run(mask: Mask) -> None:
            value = as_tensor(init(mask), dtype)
            env[name] = value.expand(total) if value.dim() == 0 else value

        return run

    def _assign(self, s: kernel_ir.Assign, scope, loop_vars: set[str]) -> Runner:
        if s.var not in scope:
            raise self._fail(f"assignment to undeclared variable {s.var}")
        if s.var in loop_vars:
            raise self._fail(f"assignment to loop variable {s.var}; loop variables are read-only")
        env, name, dtype, total = self.env, s.var, scope[s.var], self.grid.total
        value_of = self.exprs.compile(s.value, scope)

        def run(mask: Mask) -> None:
            value = as_tensor(value_of(mask), dtype)
            if mask.full:
                env[name] = value.expand(total) if value.dim() == 0 else value
            else:
                env[name] = torch.where(mask.active, value, env[name])

        return run

    def _store(self, s: kernel_ir.Store, scope) -> Runner:
        memory = self.exprs.memory(s.array, len(s.index), "store to")
        if isinstance(memory, GlobalArray) and not memory.writable:
            raise self._fail(f"store to input parameter {s.array}; only writable parameters may be stored to")
        indices = [self.exprs.compile(i, scope) for i in s.index]
        value_of = self.exprs.compile(s.value, scope)
        site = next(self.sites)

        def run(mask: Mask) -> None:
            value = value_of(mask)
            memory.write([f(mask) for f in indices], value, mask, site)

        return run

    def _atomic_add(self, s: kernel_ir.AtomicAdd, scope) -> Runner:
        """The running threads' additions one at a time, in the order of their index in the grid:
        one order the GPU may take. Every block reaches the statement in the same lockstep step, so
        what each block stored before it is in memory by then, as a ``ThreadFence`` before the
        atomic makes it on the GPU; no fence has more to do here."""
        memory = self.exprs.memory(s.array, 1, "atomic add to")
        register = self.exprs.memory(s.dst, len(s.dst_index), "atomic add into")
        if not (isinstance(memory, GlobalArray) and memory.writable):
            raise self._fail(f"atomic add to {s.array}; only writable parameters take atomics")
        index_of = self.exprs.compile(s.index, scope)
        value_of = self.exprs.compile(s.value, scope)
        destination = [self.exprs.compile(i, scope) for i in s.dst_index]
        site = next(self.sites)

        def run(mask: Mask) -> None:
            total = self.grid.total
            offsets = per_thread(as_index(index_of(mask)), total)
            values = per_thread(as_tensor(value_of(mask), memory.dtype), total)
            valid = memory.valid(offsets, mask, site, 1, "atomic add to")
            before = torch.zeros(total, dtype=memory.data.dtype)
            for thread in valid.active.nonzero().squeeze(1).tolist():
                at = int(offsets[thread])
                before[thread] = memory.data[at]
                memory.data[at] += values[thread]
            register.write([f(mask) for f in destination], before, valid, site)

        return run

    def _for(self, s: kernel_ir.For, scope, loop_vars: set[str]) -> Runner:
        if s.step == 0:
            raise self._fail(f"loop {s.var} has step 0")
        start_of = self.exprs.compile(s.start, scope)
        stop_of = self.exprs.compile(s.stop, scope)
        body = self._body(s.body, {**scope, s.var: dtypes.index}, loop_vars | {s.var})
        env, name, step = self.env, s.var, s.step

        def run(mask: Mask) -> None:
            start = self._uniform(start_of(mask), mask, s, "start")
            stop = self._uniform(stop_of(mask), mask, s, "stop")
            if start is None or stop is None:
                return
            saved = env.get(name)
            for i in range(start, stop, step):
                env[name] = torch.tensor(i)
                body(mask)
            if saved is not None:
                env[name] = saved

        return run

    def _uniform(self, value: torch.Tensor, mask: Mask, loop: kernel_ir.For, which: str) -> int | None:
        """A loop bound as a number; None when no thread runs the loop."""
        if value.dim() == 0:
            return int(value)
        if not mask.full:
            value = value.index_select(0, mask.active.nonzero().squeeze(1))
        if value.numel() == 0:
            return None
        low, high = torch.aminmax(value)
        if int(low) != int(high):
            raise SimulationError(
                f"kernel {self.kernel.name}: the {which} of loop {loop.var} "
                f"({kernel_ir.format_expr(getattr(loop, which))}) ranges from {int(low)} to {int(high)} "
                f"across threads; loop bounds must be uniform across the grid: "
                f"loop over the largest range and guard the body with an If")
        return int(low)

    def _if(self, s: kernel_ir.If, scope, loop_vars: set[str]) -> Runner:
        cond_of = self.exprs.compile(s.cond, scope)
        then = self._body(s.then, scope, loop_vars)
        orelse = self._body(s.orelse, scope, loop_vars) if s.orelse else None
        concurrent = self.tasks is not None and orelse is not None and (_waits(s.then) or _waits(s.orelse))

        def run(mask: Mask) -> None:
            cond = as_tensor(cond_of(mask), dtypes.bool_)
            if cond.dim() == 0:
                branch = then if bool(cond) else orelse
                if branch is not None:
                    branch(mask)
                return
            taken = mask.narrow(cond)
            if concurrent:
                other = mask.narrow(~cond)
                branches = [(branch, m) for branch, m in ((then, taken), (orelse, other)) if m.any()]
                if len(branches) == 2:
                    self.tasks.fork(branches)
                    return
            if taken.any():
                then(taken)
            if orelse is not None:
                other = mask.narrow(~cond)
                if other.any():
                    orelse(other)

        return run

    def _divergent(self, s: kernel_ir.Divergent, scope, loop_vars: set[str]) -> Runner:
        """Each group's threads run the body: as tasks of their own where it waits on mbarriers."""
        group_of = self.exprs.compile(s.group, scope)
        body = self._body(s.body, scope, loop_vars)
        concurrent = self.tasks is not None and _waits(s.body)
        count, kernel = s.count, self.kernel.name

        def run(mask: Mask) -> None:
            group = as_tensor(group_of(mask), dtypes.index)
            if group.dim() == 0:
                group = group.expand(mask.active.shape)
            outside = mask.active & ((group < 0) | (group >= count))
            if bool(outside.any()):
                raise SimulationError(f"kernel {kernel}: a thread's group {kernel_ir.format_expr(s.group)} = "
                                      f"{int(group[outside.nonzero()[0, 0]])} is outside 0..{count - 1}")
            groups = [m for m in (mask.narrow(group == g) for g in range(count)) if m.any()]
            if concurrent and len(groups) > 1:
                self.tasks.fork([(body, m) for m in groups])
                return
            for m in groups:
                body(m)

        return run

    def _barrier(self) -> Runner:
        grid, shared, faults, site = self.grid, self.shared, self.faults, next(self.sites)

        def run(mask: Mask) -> None:
            blocks = None
            if not mask.full:
                arrived = mask.active.view(grid.blocks, grid.threads_per_block).sum(1)
                partial = (arrived > 0) & (arrived < grid.threads_per_block)
                faults.add(RACES, (site,), partial, lambda block: (
                    f"barrier reached by {int(arrived[block])} of {grid.threads_per_block} threads of "
                    f"{grid.describe_block(block)}: every thread of a block must reach each barrier"))
                blocks = (arrived > 0).nonzero().squeeze(1)
            for array in shared:
                array.barrier(blocks)
            self.mbarriers.barrier(blocks)

        return run

    def _cluster_barrier(self) -> Runner:
        grid, shared, faults, site = self.grid, self.shared, self.faults, next(self.sites)

        def run(mask: Mask) -> None:
            if not mask.full:
                clusters = grid.cluster_first_block.view(grid.blocks, grid.threads_per_block)[:, 0]
                arrived = torch.zeros(grid.blocks, dtype=torch.long).index_add_(
                    0, clusters, mask.active.view(grid.blocks, grid.threads_per_block).sum(1))
                expected = grid.threads_per_block * grid.cluster_blocks
                partial = (arrived > 0) & (arrived < expected)
                faults.add(RACES, (site,), partial, lambda block: (
                    f"cluster barrier reached by {int(arrived[block])} of {expected} threads of the cluster of "
                    f"{grid.describe_block(block)}: every thread of a cluster must reach each cluster barrier"))
            for array in shared:
                array.cluster_barrier()
            self.mbarriers.cluster_barrier()

        return run

    def _cp_async(self, s: kernel_ir.CpAsync, scope) -> Runner:
        dst = self.exprs.memory(s.dst, len(s.dst_index), "cp.async to")
        src = self.exprs.memory(s.src, len(s.src_index), "cp.async from")
        if not isinstance(dst, SharedArray):
            raise self._fail(f"cp.async destination {s.dst} is not a shared array")
        if not isinstance(src, GlobalArray):
            raise self._fail(f"cp.async source {s.src} is not a global parameter")
        if dst.dtype != src.dtype:
            raise self._fail(f"cp.async copies {src.dtype} from {s.src} into {dst.dtype} array {s.dst}; "
                             f"the types must match")
        if s.bytes not in (4, 8, 16) or s.bytes % dst.itemsize:
            raise self._fail(f"cp.async of {s.bytes} B of {dst.dtype}: it copies 4, 8 or 16 bytes, "
                             f"a whole number of elements")
        width = s.bytes // dst.itemsize
        dst_of = [self.exprs.compile(i, scope) for i in s.dst_index]
        (src_of,) = [self.exprs.compile(i, scope) for i in s.src_index]
        predicate_of = self.exprs.compile(s.predicate, scope) if s.predicate is not None else None
        site, source_site, groups, total = next(self.sites), next(self.sites), self.groups, self.grid.total

        def run(mask: Mask) -> None:
            lanes = dst.lanes([f(mask) for f in dst_of], mask, site, "cp.async to", width)
            if lanes is None:
                return
            copying = mask
            if not lanes.every:
                copying = Mask(torch.zeros(total, dtype=torch.bool).index_fill_(0, lanes.threads, True))
            reading = copying.narrow(as_tensor(predicate_of(mask), dtypes.bool_)) if predicate_of else copying
            offset = src_of(mask)
            values = src.read([offset], reading, source_site, width, "cp.async from")
            values = per_thread(values, total).reshape(total, width)
            if not reading.full:
                values = torch.where(reading.active.unsqueeze(1), values, torch.zeros((), dtype=values.dtype))
            if not lanes.every:
                values = values.index_select(0, lanes.threads)
            if s.bytes > dst.itemsize:
                self._check_alignment(s, lanes, offset, reading, site)
            copy = groups.new_copy_id()
            groups.issued(copy, dst, dst.write_async(lanes, values, copy, site))

        return run

    def _check_alignment(self, s: kernel_ir.CpAsync, lanes: Lanes, offset: torch.Tensor, reading: Mask,
                         site: int) -> None:
        """cp.async of 8 or 16 bytes needs both addresses aligned to that many bytes."""
        itemsize, size, grid = self.memories[s.dst].itemsize, s.bytes, self.grid
        dst_bytes = lanes.flat * itemsize
        self.faults.add(MISALIGNED, (site, "dst"), dst_bytes % size != 0, lambda i: (
            f"cp.async of {size} B to {s.dst} at byte {int(dst_bytes[i])} of the array is not {size}-byte "
            f"aligned, by {grid.describe_thread(int(lanes.threads[i]))}"))
        src_bytes = (as_index(offset) * itemsize).expand(grid.total)
        bad = (src_bytes % size != 0) & reading.active
        self.faults.add(MISALIGNED, (site, "src"), bad, lambda thread: (
            f"cp.async of {size} B from {s.src} at byte {int(src_bytes[thread])} is not {size}-byte "
            f"aligned, by {grid.describe_thread(thread)}"))


def _waits(body) -> bool:
    """Whether a body waits on an mbarrier, so that its threads may wait for threads of other branches."""
    return any(isinstance(s, kernel_ir.MbarrierWait) for s in kernel_ir.statements(body))

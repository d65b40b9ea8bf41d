"""The pointwise schedule's decisions, written as Tile IR.

The flattened output is cut into vectors of ``vector_width`` adjacent elements along
the innermost loop. Block ``b`` owns a contiguous run of ``threads * vectors_per_thread
* steps`` vectors; in each of its ``steps`` a thread handles ``vectors_per_thread`` of
them, ``threads`` apart, so that neighbouring threads touch neighbouring vectors (one
coalesced access per warp). By default a thread handles one vector in one step and the
grid has a block for every ``threads`` vectors: on the H200 that beat the grid capped at
what the SMs hold at once, with several vectors per thread, by 10% on fp32 silu(gate) * up
at 2048 tokens and 5% on RoPE, cold
(``experiments/memory_bound/``).

Knobs the user may pin: ``vector_width`` (a power of two dividing the innermost
extent), ``vectors_per_thread`` (1 to 8), ``threads`` (a multiple of the warp, at
most 512) and ``steps`` (how many times each thread repeats its vectors, which sets
the grid). Every pinned combination must leave the thread's vectors in registers.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Mapping

import attrs

from lamina.core.errors import ScheduleError
from lamina.core.ir import expr as ex, loop_ir, sizes, tile_ir
from lamina.core.ir.sizes import Size
from lamina.core.target import Target
from lamina.plugins.schedules.pointwise.analysis import (
    VECTOR_BYTES,
    AccessPlan,
    Branch,
    Guard,
    PointwiseNest,
    contiguous_itemsizes,
    plan_accesses,
    pointwise_nest,
)

MAX_VECTOR_WIDTH = 16
MAX_VECTORS_PER_THREAD = 8
MAX_THREADS = 512
"""With 1024 threads a block leaves ptxas 32 to 64 registers a thread, and it spills
even modest kernels; a pointwise kernel gains nothing from blocks that large."""
REGISTERS_PER_BLOCK = 64 * 1024
REGISTERS_BESIDES_VECTORS = 32
"""What a thread needs for addresses, coordinates and arithmetic, on top of its vectors
(RoPE's rotated loads take the most of the kernels measured)."""
SMALL_BLOCK = 128
LARGE_BLOCK = 256


@attrs.frozen
class Decisions:
    vector_width: int
    vectors_per_thread: int
    threads: int
    steps: int
    blocks: Size

    @property
    def vectors_per_block(self) -> int:
        return self.threads * self.vectors_per_thread * self.steps


def nest_of(kernel: loop_ir.Kernel) -> PointwiseNest:
    nest = pointwise_nest(kernel)
    if nest is None:
        raise ScheduleError(
            f"kernel {kernel.name} is not pointwise (parallel loops around stores only), so the pointwise "
            "schedule cannot run it; leave the schedule unpinned or pin one that applies, such as generic"
        )
    return nest


def tile(kernel: loop_ir.Kernel, target: Target, knobs: Mapping[str, Any], schedule: str) -> tile_ir.TileKernel:
    nest = nest_of(kernel)
    plan = plan_accesses(kernel, nest, choose_width(kernel, nest, target, knobs))
    total = sizes.numel([loop.extent for loop in nest.loops])
    d = choose_grid(kernel, plan, sizes.size(total // plan.width), target, knobs)
    binding = tile_ir.AxisBinding(
        vars=tuple(loop.var for loop in nest.loops),
        extent=total,
        block_dim="x",
        threads=d.threads,
        per_thread=d.vector_width * d.vectors_per_thread * d.steps,
        contiguous=d.vectors_per_thread * d.steps == 1,
    )
    decided = (("vectors_per_thread", d.vectors_per_thread), ("steps", d.steps)) + describe_accesses(plan)
    result = tile_ir.TileKernel(kernel=kernel, schedule=schedule, grid=(binding,), vector_width=d.vector_width,
                                knobs=decided)
    tile_ir.verify_tile_kernel(result, target.max_threads_per_block, target.max_shared_bytes_optin)
    return result


def decisions(tile: tile_ir.TileKernel) -> Decisions:
    """The decisions a pointwise Tile IR spells out."""
    (binding,) = tile.grid
    knobs = dict(tile.knobs)
    blocks = binding.blocks if sizes.is_symbolic(binding.blocks) else max(1, binding.blocks)
    return Decisions(tile.vector_width, knobs["vectors_per_thread"], binding.threads, knobs["steps"], blocks)


def describe_accesses(plan: AccessPlan) -> tuple[tuple[str, str], ...]:
    """The accesses of each kind, a guarded vector load with the branches it is loaded
    under, and the conditions evaluated once per vector."""
    groups = (("vector_loads", plan.vector_loads), ("scalar_loads", plan.scalar_loads),
              ("vector_stores", plan.vector_stores), ("scalar_stores", plan.scalar_stores))
    described = tuple((name, ", ".join(_access_text(a, _guard(plan, a)) for a in accesses))
                      for name, accesses in groups if accesses)
    if plan.conditions:
        described += (("conditions_per_vector", ", ".join(loop_ir.format_value(c) for c in plan.conditions)),)
    return described


def _guard(plan: AccessPlan, access: loop_ir.Load | loop_ir.Store) -> Guard:
    """What a vector load is made under, or the condition a store is made under where it keeps
    its element otherwise (``kept_where_not``)."""
    if isinstance(access, loop_ir.Load):
        return plan.guard(access)
    condition = plan.kept_where_not(access)
    return () if condition is None else (Branch(condition, True),)


def _access_text(access: loop_ir.Load | loop_ir.Store, guard: Guard = ()) -> str:
    text = f"{access.buffer}[{', '.join(loop_ir.format_index(i) for i in access.index)}]"
    for branch in guard:
        text += f" {'if' if branch.taken else 'unless'} {loop_ir.format_value(branch.condition)}"
    return text


def _pinned(knobs: Mapping[str, Any], name: str, kernel: str, usable, requirement: str) -> int | None:
    value = knobs.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not usable(value):
        raise ScheduleError(f"kernel {kernel}, pointwise schedule: the knob {name} = {value!r} is not usable: "
                            f"it must be {requirement}")
    return value


def pinned_threads(kernel: loop_ir.Kernel, target: Target, knobs: Mapping[str, Any]) -> int | None:
    warp, limit = target.warp_size, min(MAX_THREADS, target.max_threads_per_block)
    return _pinned(knobs, "threads", kernel.name, lambda t: 0 < t <= limit and t % warp == 0,
                   f"a multiple of {warp} from {warp} to {limit} for this schedule")


def choose_width(kernel: loop_ir.Kernel, nest: PointwiseNest, target: Target, knobs: Mapping[str, Any]) -> int:
    """The pinned ``vector_width``, else, of the widths from 16 bytes of the widest
    contiguous output (of the widest contiguous input where no output is contiguous)
    down, that divide the innermost extent, make some access a vector and fit in
    registers, the one that leaves the fewest scalar accesses, the widest of those.

    A narrower vector can turn more accesses into vectors (RoPE's rotated half with
    head_dim 12 is one at 2 lanes, not at 4); a scalar access costs an instruction per
    element, which is worth more than the wider vector. A kernel of few elements that computes
    a function of each (a decoding step's keys, rotated and written into the cache: 256
    elements, a sine and a cosine each) takes the narrower vector that gives it a block of
    ``SMALL_BLOCK`` threads, where that leaves no more accesses scalar: on one warp its
    elements' functions run one after another."""
    extent = nest.inner_extent
    pinned = _pinned(knobs, "vector_width", kernel.name, lambda w: 0 < w <= MAX_VECTOR_WIDTH and w & (w - 1) == 0,
                     f"a power of two from 1 to {MAX_VECTOR_WIDTH}")
    if pinned is not None:
        if extent % pinned:
            raise ScheduleError(
                f"kernel {kernel.name}, pointwise schedule: the knob vector_width = {pinned} does not divide the "
                f"innermost extent {extent}, so some vectors would run past a row; pin a power of two that "
                f"divides {extent}, or leave vector_width unpinned"
            )
        return pinned
    threads = pinned_threads(kernel, target, knobs) or LARGE_BLOCK
    return _widest_usable(loop_ir.with_positional_names(kernel), target, threads)


@functools.lru_cache(maxsize=256)
def _widest_usable(kernel: loop_ir.Kernel, target: Target, threads: int) -> int:
    """``choose_width``'s search, once per kernel shape (names erased): a model's layers repeat it."""
    nest = nest_of(kernel)
    extent = nest.inner_extent
    stores, reads = contiguous_itemsizes(kernel, nest)
    itemsizes = stores or reads
    if not itemsizes:
        return 1
    usable = []
    width = VECTOR_BYTES // max(itemsizes)
    while width > 1:
        plan = plan_accesses(kernel, nest, width)
        if extent % width == 0 and plan.has_vectors and registers_fit(kernel, plan, 1, threads, target):
            usable.append(plan)
        width //= 2
    if not usable:
        return 1
    best = min(usable, key=lambda plan: (plan.scalar_accesses, -plan.width))
    elements = sizes.hint(sizes.numel([loop.extent for loop in nest.loops]))

    def fills_a_small_block(width: int) -> bool:
        return _threads_for(math.ceil(elements / width), target) >= SMALL_BLOCK

    if fills_a_small_block(best.width) or not _computes_functions(nest):
        return best.width
    alike = [plan.width for plan in usable if plan.scalar_accesses == best.scalar_accesses]
    enough = [width for width in alike if fills_a_small_block(width)]
    return max(enough) if enough else min(alike)


def _computes_functions(nest: PointwiseNest) -> bool:
    """Whether the stored values compute a function (a sine, an exponential), whose instructions
    each element runs one after another."""
    return any(isinstance(node, ex.Op) and ex.OPS[node.op].kind == "math"
               for store in nest.stores for node in ex.walk(store.value))


def choose_grid(kernel: loop_ir.Kernel, plan: AccessPlan, vectors: Size, target: Target,
                knobs: Mapping[str, Any]) -> Decisions:
    """Threads (pinned, else by the number of vectors, at its hint where it is known only at run
    time), vectors per thread and steps (pinned, else one of each), and the blocks that leaves."""
    threads = pinned_threads(kernel, target, knobs)
    per_thread = _pinned(knobs, "vectors_per_thread", kernel.name,
                         lambda p: 0 < p <= MAX_VECTORS_PER_THREAD, f"from 1 to {MAX_VECTORS_PER_THREAD}")
    per_thread = per_thread or 1
    if threads is None:
        threads = _threads_for(math.ceil(sizes.hint(vectors) / per_thread), target)
    if not registers_fit(kernel, plan, per_thread, threads, target):
        available = register_budget(threads, target)
        raise ScheduleError(
            f"kernel {kernel.name}, pointwise schedule: {per_thread} vector(s) of {plan.width} elements per thread "
            f"take {vector_registers(kernel, plan, per_thread)} registers, and with the {REGISTERS_BESIDES_VECTORS} "
            f"the rest of the kernel needs that is more than the {available} a thread of a {threads}-thread block "
            "has; pin fewer vectors_per_thread, a narrower vector_width or fewer threads"
        )
    steps = _pinned(knobs, "steps", kernel.name, lambda s: s > 0, "a positive number of steps") or 1
    return Decisions(plan.width, per_thread, threads, steps, sizes.blocks(vectors, steps * threads * per_thread))


def _threads_for(items: int, target: Target) -> int:
    """Small kernels get a whole number of warps so that no block is mostly idle; large
    ones 256 threads once there are two waves of such blocks."""
    if items <= SMALL_BLOCK:
        return max(target.warp_size, math.ceil(items / target.warp_size) * target.warp_size)
    if items >= 2 * LARGE_BLOCK * target.sm_count:
        return LARGE_BLOCK
    return SMALL_BLOCK


def vector_registers(kernel: loop_ir.Kernel, plan: AccessPlan, per_thread: int) -> int:
    """The 32-bit registers a thread's vectors hold at the peak: every vector it loaded,
    and the results of one of them."""
    loaded = sum(kernel.buffer(load.buffer).type.dtype.itemsize for load in plan.vector_loads)
    stored = sum(kernel.buffer(store.buffer).type.dtype.itemsize for store in plan.vector_stores)
    return math.ceil((per_thread * plan.width * loaded + plan.width * stored) / 4)


def register_budget(threads: int, target: Target) -> int:
    return min(target.registers_per_thread, REGISTERS_PER_BLOCK // threads)


def registers_fit(kernel: loop_ir.Kernel, plan: AccessPlan, per_thread: int, threads: int, target: Target) -> bool:
    needed = vector_registers(kernel, plan, per_thread) + REGISTERS_BESIDES_VECTORS
    return needed <= register_budget(threads, target)

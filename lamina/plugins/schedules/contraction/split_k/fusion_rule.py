"""Split a skinny contraction's reduction across blocks (split-K) when its grid leaves SMs idle.

A linear with M = 128 rows has too few output tiles to give every SM of the device
enough blocks: small tiles keep the SMs busy but are slow per multiply-add, large ones
leave most SMs without a block. Cutting K into S slices that separate blocks sum
(``partial_sums``) multiplies the blocks by S at the price of writing S partial sums
and a second kernel that adds them up.

The contraction cost model decides. For every S up to ``MAX_SPLITS`` that cuts K into
slices of whole 16-deep k-tiles (``slices``: as equal as they can be, the last one shorter
where they cannot be equal), or of whole 64-deep ones (the Hopper GEMM's), the split costs
the partial kernel's estimate, which its longest slice sets, plus the combine's (its bytes
over the bandwidth, plus a launch); the cheapest S is taken when it is more than ``MIN_GAIN``
below the unsplit kernel's estimate, and the partial sums may take at most
``MAX_PARTIAL_BYTES``. A grid that fills the SMs may
still gain: Qwen2.5-7B's gate and up projections at 128 rows make 296 blocks of 128 x 128,
one full wave of two per SM and a second of 32; four slices make four and a half waves
of larger blocks. TinyLlama's gate and up projections make 88 blocks, and three slices
(43, 43 and 42 k-tiles) make the 264 that fill the SMs once, where equal slices of K = 2048
come only in powers of two.
A decoding GEMV (M = 1) is a row reduction, not a contraction, and never reaches this
rule. The knob ``split_k`` pins S for every contraction (1: never split).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Mapping

import attrs

from lamina.core.errors import ScheduleError
from lamina.core.ir import loop_ir
from lamina.core.target import Target
from lamina.plugins.schedules.contraction.knobs import FORMER_KNOB_NAMES, KNOB_NAMES, KNOBS, PIPELINE_KNOB_NAMES, read_pinned
from lamina.plugins.schedules.contraction.split_k.partial_sums import partial_of, slices_fit, split
from lamina.plugins.schedules.contraction.recognise import NotAContraction, analyse
from lamina.plugins.schedules.contraction import cost, schedule as contraction_schedule
from lamina.plugins.schedules.contraction.slices import SLICE_MULTIPLE, slice_length
from lamina.plugins.schedules.contraction.split_k.unrolled_reduction import MAX_UNROLLED, UnrolledReductionSchedule

KNOB = "split_k"
MAX_SPLITS = MAX_UNROLLED
"""The combine reads all the partial sums of an output at once (``unrolled_reduction``)."""
TMA_SLICE_MULTIPLE = 64
"""The 16-bit Hopper GEMM copies 64-deep k-tiles, so its slices are whole 64s (TinyLlama's K =
2048 in three slices: 704, 704 and 640); slices of 16s are tried as well, and the cheaper kept."""
MIN_GAIN = 0.01
"""The split must be estimated this much faster than the unsplit kernel. The estimates
underrate splits: Qwen's gate and up projections at 128 rows are estimated 9 % faster
split and measured 29 % faster; its qkv, o and down projections at 2048 rows, in two
slices of 128 x 128 blocks, are estimated 1.7 to 3.4 % faster than the unsplit 64 x 128
blocks and measured 4 to 6 % faster, where TinyLlama's down projection, estimated slower
split, measured 1 % slower (``experiments/contraction_tiling/``)."""
MAX_PARTIAL_BYTES = 80 * 1024 * 1024
"""The partial sums are memory the unsplit program never needs. Qwen2.5-7B's gate and up
projections at 128 rows take 4 slices, 74 MiB of partial sums, and run 1.29x faster than
unsplit on the H200 (the model's fp32 weights take 30 GB); a split that needs more than this
bound takes fewer slices, or none (``experiments/contraction_tiling/``)."""
COMBINE = UnrolledReductionSchedule()


@attrs.frozen
class SplitChoice:
    """The slices chosen for one contraction, and the estimates (microseconds) that chose them."""

    splits: int
    unsplit_us: float
    partial_us: float
    combine_us: float
    multiple: int = SLICE_MULTIPLE
    """What every slice but the last is a whole number of: 16, the CUDA cores' k-tile, or 64,
    the TMA's (``TMA_SLICE_MULTIPLE``)."""

    @property
    def split_us(self) -> float:
        return self.partial_us + self.combine_us


def usable_splits(extent: int) -> list[int]:
    """The slice counts from 2 to ``MAX_SPLITS`` that cut a reduction of ``extent`` into
    slices of whole k-tiles, none of them empty."""
    return [s for s in range(2, MAX_SPLITS + 1) if slice_length(extent, s) is not None]


def pinned_splits(knobs: Mapping[str, Any], where: str) -> int | None:
    value = knobs.get(KNOB)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ScheduleError(f"{where}: knob {KNOB} = {value!r} must be a positive integer (1: never split)")
    return value


def choose(kernel: loop_ir.Kernel, target: Target, knobs: Mapping[str, Any]) -> SplitChoice | None:
    """How ``kernel`` is split, or None when it stays whole."""
    try:
        c = analyse(kernel)
    except NotAContraction:
        return None
    where = f"kernel {kernel.name}, split-K"
    pinned = pinned_splits(knobs, where)
    if partial_of(kernel) is not None or pinned == 1:
        return None
    if pinned is not None and not slices_fit(c, pinned):
        choices = ", ".join(map(str, usable_splits(c.reduce_extent))) or "none"
        raise ScheduleError(
            f"{where}: knob {KNOB} = {pinned} does not cut the reduction of {c.reduce_extent} into slices "
            f"of whole multiples of {SLICE_MULTIPLE}, none of them empty; pin one of: {choices}, or 1 to never split"
        )
    tiling = tuple((KNOBS.get(field, field), value) for field, value in read_pinned(knobs, where).items())
    if pinned is None:
        return _choose(loop_ir.with_positional_names(kernel), target, tiling, None)
    try:
        return _choose(kernel, target, tiling, pinned)
    except ScheduleError as e:
        raise ScheduleError(f"{where}: knob {KNOB} = {pinned} leaves the partial sums no setting: {e}") from None


@functools.lru_cache(maxsize=256)
def _choose(
    kernel: loop_ir.Kernel, target: Target, tiling: tuple[tuple[str, int], ...], pinned: int | None
) -> SplitChoice | None:
    """The search, once per kernel shape and pinned tiling: the fusion driver asks again
    after every change to the program. A pinned split whose partial kernel no setting can
    run raises the schedule's reason."""
    c = analyse(kernel)
    settings = dict(tiling)
    try:
        whole = contraction_schedule.cheapest_estimate(kernel, target, settings)
    except ScheduleError:
        return None
    best = None
    output_points = math.prod(extent for var, extent in c.extents.items() if var != c.reduce_var)
    failure = None
    for splits in [pinned] if pinned is not None else usable_splits(c.reduce_extent):
        partial_bytes = splits * output_points * c.acc_dtype.itemsize
        if pinned is None and partial_bytes > MAX_PARTIAL_BYTES:
            continue
        floor = cost.floor_of_work_us(cost.products(c), partial_bytes, target)
        if pinned is None and floor + _combine_floor_us(partial_bytes, target) >= _bound(best, whole):
            break  # the partial sums and their combine cannot pay even at their floors, nor can more slices
        lengths = set()
        for multiple in (SLICE_MULTIPLE, TMA_SLICE_MULTIPLE):
            length = slice_length(c.reduce_extent, splits, multiple)
            if length is None or length in lengths:
                continue
            lengths.add(length)
            parts = split(c, splits, set(), multiple)
            combine_us = COMBINE.estimate_cost(parts.combine, target)
            if pinned is None and floor + combine_us >= _bound(best, whole):
                continue  # the partial sums at their floor and the combine cost what would not be chosen
            try:
                partial_us = contraction_schedule.cheapest_estimate(parts.partial, target, settings).total_us
            except ScheduleError as e:
                failure = failure or e
                continue
            choice = SplitChoice(splits, whole.total_us, partial_us, combine_us, multiple)
            if best is None or choice.split_us < best.split_us:
                best = choice
    if pinned is not None and best is None and failure is not None:
        raise failure
    if best is None or (pinned is None and best.split_us >= (1 - MIN_GAIN) * whole.total_us):
        return None
    return best


def _bound(best: SplitChoice | None, whole: cost.Estimate) -> float:
    """What a split must cost less than to be chosen: the best so far, and the whole product less
    ``MIN_GAIN``. Each slice count's partial sums write more than the count before and their
    combine reads more, so the floors of both only grow while this only falls: the search stops at
    the first count whose floors reach it (the choice is the one a search of every count makes)."""
    return min(best.split_us if best is not None else math.inf, (1 - MIN_GAIN) * whole.total_us)


def _combine_floor_us(partial_bytes: int, target: Target) -> float:
    """Less than the combine's estimate (a pointwise kernel's: its bytes at a fraction of the
    memory's pace, and a launch): a launch and a read of every partial sum at the memory's pace."""
    return target.launch_us + partial_bytes / target.memory_bytes_per_us


class SplitContractionsAcrossBlocks:
    """Rewrites each contraction that ``choose`` splits into a partial kernel and a combine."""

    name = "split_contractions_across_blocks"
    priority = 5
    knob_namespace = "contraction"
    knob_names = (KNOB, *KNOB_NAMES, *PIPELINE_KNOB_NAMES)
    former_knob_names = FORMER_KNOB_NAMES

    def apply(self, program: loop_ir.Program, target: Target, knobs: Mapping[str, Any]) -> loop_ir.Program | None:
        taken = {b.name for b in program.inputs + program.outputs + program.temporaries}
        taken |= {k.name for k in program.kernels} | {b.name for k in program.kernels for b in k.inputs + k.outputs}
        kernels: list[loop_ir.Kernel] = []
        temporaries = list(program.temporaries)
        for kernel in program.kernels:
            # a kernel of sizes known only at run time runs on a schedule that takes them, untiled
            choice = None if loop_ir.has_symbolic_sizes(kernel) else choose(kernel, target, knobs)
            if choice is None:
                kernels.append(kernel)
                continue
            parts = split(analyse(kernel), choice.splits, taken, choice.multiple)
            kernels += [parts.partial, parts.combine]
            temporaries.append(parts.partials)
        if len(kernels) == len(program.kernels):
            return None
        return attrs.evolve(program, kernels=tuple(kernels), temporaries=tuple(temporaries))

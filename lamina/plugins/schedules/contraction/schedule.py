"""The contraction schedule's entry: the pinned knobs, the cost model's choice, its arrangement and
copy issue, the Tile IR."""

from __future__ import annotations

import math
from typing import Any, Mapping

import attrs

from lamina.core.errors import ScheduleError, SymbolicSizeError
from lamina.core.ir import loop_ir, sizes, tile_ir
from lamina.core.selection import Setting
from lamina.core.target import Target
from lamina.plugins.schedules.contraction import arrangement, copy_issue, cost, tiling
from lamina.plugins.schedules.contraction.knobs import KNOBS, WGMMA, WGMMA_TMA, Choices, pins_text, read_pinned
from lamina.plugins.schedules.contraction.split_k.partial_sums import partial_of
from lamina.plugins.schedules.contraction.recognise import analyse
from lamina.plugins.schedules.contraction.tiling import SCHEDULE_NAME
from lamina.plugins.schedules.contraction.wgmma_tma import setting as tma_setting


def _where(kernel: loop_ir.Kernel) -> str:
    return f"kernel {kernel.name}, contraction schedule"


def _cheapest(kernel: loop_ir.Kernel, target: Target, pinned: tuple[tuple[str, int], ...]):
    """The kernel's contraction and the cost model's choice for it."""
    c = analyse(kernel, joined=True)
    key = (loop_ir.with_positional_names(kernel), tuple(c.hinted().extents.values()), target, pinned)
    found = _choices.get(key)
    if found is None:
        found = _choices[key] = cost.choose(c.hinted(), target, dict(pinned), _where(kernel))
        while len(_choices) > CHOICES_KEPT:
            del _choices[next(iter(_choices))]
    return c, found


CHOICES_KEPT = 1024
_choices: dict[tuple, tuple] = {}
"""The cost model's choice per kernel shape (names left out), target and pins: the selection
policy asks for the estimate and the pipeline then for the schedule, split-K for each way to
split, and every layer of a model has the same kernels; the search runs once for them all."""


def _hints(c) -> str:
    """The sizes known only at run time at which the cost model weighed the settings."""
    symbols = sorted(sizes.symbols(tuple(c.extents.values())))
    return ", ".join(f"{name} = {sizes.hint(sizes.symbol(int(name[1:])))}" for name in symbols)


def schedule_contraction(kernel: loop_ir.Kernel, target: Target, knobs: Mapping[str, Any]) -> tile_ir.TileKernel:
    pinned = read_pinned(knobs, _where(kernel))
    c, (choices, estimate, count) = _cheapest(kernel, target, tuple(pinned.items()))
    pins = pins_text(pinned) or "none"
    pipelined = tma_setting.uses(choices)
    hinted = c.hinted()
    # the batch entries whose block rows run as one column: 1 where a size is symbolic
    batch_rows = tma_setting.batch_rows(c, choices) if pipelined else arrangement.batch_as_rows(c)
    if pipelined:
        choices = arrangement.grouped(hinted, choices, estimate.resident, target, batch_rows)
    else:
        choices = arrangement.arranged(hinted, choices, estimate.resident, target, batch_rows)
        choices = copy_issue.chosen(hinted, choices, tiling.copies_asynchronously(c, target))
    floor = cost.cuda_core_floor_us(hinted, target)
    unweighed = (f" (the CUDA cores', at least {floor:.1f} us, not weighed)"
                 if choices.products in (WGMMA, WGMMA_TMA) and estimate.total_us < floor else "")
    notes = [
        ("chosen", f"{choices.summary()}; cheapest of {count} settings{unweighed}, pinned: {pins}"
                   + (f"; weighed at {_hints(c)}" if c.symbolic else "")),
        ("estimate", estimate.text()),
        *([arrangement.block_order(hinted, choices, estimate.resident, target, batch_rows)] if pipelined
          else arrangement.describe(hinted, choices, estimate.resident, target, batch_rows)),
    ]
    split = partial_of(kernel)
    if split is not None:
        notes.insert(0, ("split_k", f"{split.splits} (partial sums, added up by the kernel that reads "
                                    f"{kernel.name})"))
    return tiling.tile_kernel(c, choices, target, notes)


def cheapest_estimate(kernel: loop_ir.Kernel, target: Target, knobs: Mapping[str, Any]) -> cost.Estimate:
    """The estimate of the setting the schedule would choose with ``knobs`` pinned
    (``ScheduleError`` where no setting can run)."""
    pinned = read_pinned(knobs, _where(kernel))
    _, (_, estimate, _) = _cheapest(kernel, target, tuple(pinned.items()))
    return estimate


def estimate_contraction(kernel: loop_ir.Kernel, target: Target) -> float:
    """Microseconds that the cheapest setting is expected to take (infinite where none can run)."""
    try:
        _, (_, estimate, _) = _cheapest(kernel, target, ())
    except ScheduleError:
        return math.inf
    return estimate.total_us


ARRANGEMENT_FIELDS = ("warp_columns", "grouped_rows", "copy_steps")
"""Fields chosen after the setting (``arrangement``, ``copy_issue``), left to the schedule when a
setting is pinned back."""


def best_contraction_settings(kernel: loop_ir.Kernel, target: Target, count: int) -> list[Setting]:
    """The ``count`` cheapest settings, each as the knobs that pin it (the arrangement of threads
    and blocks left to the schedule); empty where none can run."""
    try:
        c = analyse(kernel, joined=True)
        settings = cost.ranked(c.hinted(), target, {}, _where(kernel))
    except (ScheduleError, SymbolicSizeError):
        return []
    return [Setting(SCHEDULE_NAME, knobs_of(choices), estimate.total_us) for choices, estimate in settings[:count]]


def knobs_of(choices: Choices) -> dict[str, Any]:
    """The knobs a user pins to get ``choices`` (fields left None are the schedule's to choose)."""
    return {KNOBS.get(field.name, field.name): getattr(choices, field.name) for field in attrs.fields(Choices)
            if field.name not in ARRANGEMENT_FIELDS and getattr(choices, field.name) is not None}

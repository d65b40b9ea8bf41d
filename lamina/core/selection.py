"""What a selection policy receives and returns, beyond the schedules themselves.

The default policy (``cost_model``) picks a schedule and lets it choose its own knobs. A policy
that measures (the autotuner in ``lamina.contrib.autotune``) needs more: each schedule's best
few settings as knobs it can pin (``Setting``, from a schedule's ``best_settings``), a way to
build a candidate exactly as the pipeline would and to run it (``SelectionContext``), and a way
to hand back knobs and a line for the Tile IR with its choice (``Selection``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import attrs

from lamina.core.errors import SymbolicSizeError

if TYPE_CHECKING:
    from lamina.core.config import Config
    from lamina.core.ir import kernel_ir, loop_ir, tile_ir
    from lamina.core.registry import Registry
    from lamina.core.target import Target


def _frozen_mapping(value: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(dict(value).items()))


@attrs.frozen
class Setting:
    """One way a schedule can run a kernel: the knobs that pin it (``knob -> value``, as a user
    would pin them under the schedule's name) and the cost model's estimate of its time."""

    schedule: str
    knobs: tuple[tuple[str, Any], ...] = attrs.field(converter=_frozen_mapping, factory=dict)
    estimate_us: float = float("inf")

    def text(self) -> str:
        pins = ", ".join(f"{k} = {v}" for k, v in self.knobs) or "its own choice"
        return f"{self.schedule} ({pins})"


@attrs.frozen
class Selection:
    """A policy's answer: the schedule, the knobs to pin for it (empty: the schedule chooses), and
    a line the Tile IR prints as ``selection: ...`` (None: nothing to say)."""

    schedule: Any
    knobs: tuple[tuple[str, Any], ...] = attrs.field(converter=_frozen_mapping, factory=dict)
    note: str | None = None


@attrs.frozen
class SelectionContext:
    """What the pipeline lends a selection policy for one kernel.

    ``build(schedule, knobs)`` schedules and lowers the kernel with ``knobs`` pinned, through the
    kernel passes, as the pipeline would (a ``LaminaError`` where the setting cannot run);
    ``registry`` reaches the backends that compile and run what was built.
    """

    target: "Target"
    config: "Config"
    registry: "Registry"
    build: Callable[[Any, Mapping[str, Any]], "tuple[tile_ir.TileKernel, kernel_ir.Kernel]"]


def estimated_us(schedule: Any, kernel: "loop_ir.Kernel", target: "Target") -> float:
    """The schedule's own estimate of ``kernel``'s time (infinite where it offers none, or needs a
    number that a size known only at run time does not give)."""
    estimate = getattr(schedule, "estimate_cost", None)
    try:
        return estimate(kernel, target) if estimate is not None else math.inf
    except SymbolicSizeError:
        return math.inf


def cheapest(kernel: "loop_ir.Kernel", candidates: Sequence[Any], target: "Target") -> Any:
    """The candidate schedule expected to run ``kernel`` fastest; among those that offer no
    estimate, the first (the registry's priority order)."""
    ranked = sorted(enumerate(candidates), key=lambda pair: (estimated_us(pair[1], kernel, target), pair[0]))
    return ranked[0][1]

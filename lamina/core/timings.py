"""Where a compile's time goes: seconds per stage, and the kernels that took longest.

The pipeline times each of its stages; the frontend adds capture and the backend the loading
of the kernels (the CUDA printing and NVRTC apart), so that ``lamina compile --timings`` can
print the whole compile. A
stage that runs several times (the CUDA printed for several watchers) adds up.
"""

from __future__ import annotations

import contextlib
import time
from typing import Iterator

import attrs

SLOWEST_KERNELS = 5
"""How many kernels the report lists, slowest first."""


@attrs.define
class Timings:
    """Seconds per stage in the order the stages ran, and per kernel (scheduling and lowering)."""

    stages: dict[str, float] = attrs.field(factory=dict)
    kernels: dict[str, float] = attrs.field(factory=dict)

    def add(self, stage: str, seconds: float) -> None:
        self.stages[stage] = self.stages.get(stage, 0.0) + seconds

    def add_first(self, stage: str, seconds: float) -> None:
        """A stage that ran before the pipeline's (capture)."""
        self.stages = {stage: seconds, **{k: v for k, v in self.stages.items() if k != stage}}

    def add_kernel(self, name: str, seconds: float) -> None:
        self.kernels[name] = self.kernels.get(name, 0.0) + seconds

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time what runs inside as stage ``name``, less the stages timed within it (the backend's
        printing and NVRTC within the loading of the kernels), so that no second counts twice."""
        started, inner = time.perf_counter(), self.total
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - started - (self.total - inner))

    @property
    def total(self) -> float:
        return sum(self.stages.values())

    def format(self) -> str:
        """A table a person reads: each stage with its seconds and share, then the slowest kernels."""
        total = self.total or 1.0
        width = max((len(s) for s in self.stages), default=5)
        lines = [f"{'stage':{width}s}  seconds  share"]
        lines += [f"{stage:{width}s}  {seconds:7.2f}  {100 * seconds / total:4.0f} %" for stage, seconds in self.stages.items()]
        lines.append(f"{'total':{width}s}  {self.total:7.2f}")
        slowest = sorted(self.kernels.items(), key=lambda item: -item[1])[:SLOWEST_KERNELS]
        if slowest:
            lines.append(f"slowest kernels to schedule and lower (of {len(self.kernels)}):")
            lines += [f"  {name}  {seconds:.2f} s" for name, seconds in slowest]
        return "\n".join(lines)

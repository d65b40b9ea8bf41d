"""A tuning session: while one runs, the ``autotune`` policy measures each kernel that the tuning
database lacks before choosing its setting, and records what it found.

The candidates of a kernel are the cost model's choice and the next cheapest settings the
schedules that apply offer (``best_settings``; a schedule without it offers its own choice), up to
``candidates`` in all. Each is built as the pipeline would build it, compiled with the others at
once, run on the same random inputs, checked against the cost model's choice, and timed twice
(the second time in the opposite order), rotating among sets of inputs that overflow L2 where one
set would stay in it (``measure.input_sets``); the fastest that agrees wins. A kernel with a single
setting to choose from is not measured.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Callable, Iterator, Sequence

import attrs
import torch
from torch.utils._python_dispatch import _disable_current_modes

from lamina.contrib.autotune.database import Entry, Measured, TuningDatabase
from lamina.contrib.autotune.measure import CandidateRuns, Timer, gpu_time_us
from lamina.contrib.autotune.provenance import device_name, driver_version
from lamina.core.errors import LaminaError
from lamina.core.ir import loop_ir
from lamina.core.selection import SelectionContext, Setting, cheapest, estimated_us
from lamina.core.version import __version__

DEFAULT_CANDIDATES = 4

_active: "Session | None" = None


def active() -> "Session | None":
    """The session running in this process, if any."""
    return _active


@contextlib.contextmanager
def session(candidates: int = DEFAULT_CANDIDATES, backend: str = "cuda", timer: Timer = gpu_time_us,
            echo: Callable[[str], None] | None = None) -> Iterator["Session"]:
    """Compiles within it with ``selection = "autotune"`` measure what the database lacks.
    ``backend`` and ``timer`` run and time the candidates (the GPU's by default)."""
    global _active
    if candidates < 1:
        raise LaminaError(f"a tuning session needs at least 1 candidate per kernel, not {candidates}")
    previous, _active = _active, Session(candidates, backend, timer, echo or _to_stderr)
    try:
        yield _active
    finally:
        _active = previous


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Session:
    def __init__(self, candidates: int, backend: str, timer: Timer, echo: Callable[[str], None]):
        self.candidates, self.backend, self.timer, self.echo = candidates, backend, timer, echo
        #: What was measured, by kernel name, in the order the kernels were tuned.
        self.tuned: list[tuple[str, Entry]] = []
        #: The kernels not measured, and why (each distinct kernel once).
        self.untuned: list[tuple[str, str]] = []
        self._tried: set[str] = set()

    def tune(self, kernel: loop_ir.Kernel, key: str, schedules: Sequence[Any], context: SelectionContext,
             database: TuningDatabase) -> Entry | None:
        """Measures ``kernel``'s candidates and records the result in ``database``; None where there
        was nothing to choose between, or the cost model's choice itself did not run (a model's layers
        repeat their kernels: each distinct one is tried once)."""
        if key in self._tried:
            return None
        self._tried.add(key)
        settings = candidate_settings(kernel, schedules, context.target, self.candidates)
        if len(settings) < 2:
            self.untuned.append((kernel.name, "a single setting to choose from"))
            return None
        by_name = {s.name: s for s in schedules}
        built: list[Any] = []
        problems: list[str | None] = []
        for position, setting in enumerate(settings):
            pins = dict(setting.knobs) if position else {}  # the cost model's choice, exactly as it makes it
            try:
                built.append(context.build(by_name[setting.schedule], pins)[1])
                problems.append(None)
            except LaminaError as e:
                built.append(None)
                problems.append(f"could not be built: {e}")
        # Within torch.compile the pipeline may run under a dispatch mode (fake tensors) and with
        # gradients on: the candidates run on real tensors, as a program's call would.
        with _disable_current_modes(), torch.no_grad():
            measured = self._measure(kernel, context, settings, built, problems)
        if measured[0].time_us is None:
            self.untuned.append((kernel.name, f"the cost model's choice {measured[0].problem}"))
            return None
        winner = min((i for i, m in enumerate(measured) if m.time_us is not None), key=lambda i: measured[i].time_us)
        entry = Entry(kernel.name, context.target.name, __version__, driver_version(), device_name(), measured, winner)
        database.put({key: entry})
        self.tuned.append((kernel.name, entry))
        ran = sum(m.time_us is not None for m in measured)
        which = "the cost model's choice, " if winner == 0 else ""
        self.echo(f"tuned {kernel.name}: {entry.chosen.time_us:.1f} us ({which}{entry.chosen.schedule}); the cost "
                  f"model's choice {entry.cost_models.time_us:.1f} us; {ran} of {len(measured)} candidates ran")
        return entry

    def _measure(self, kernel: loop_ir.Kernel, context: SelectionContext, settings: list[Setting], built: list[Any],
                 problems: list[str | None]) -> list[Measured]:
        """Each candidate run and timed, its result checked against the first's (the cost model's
        choice); measuring stops at the first where that one did not run. The candidates that ran
        are timed again in the opposite order, each keeping its faster median, so that what drifts
        along a session (the GPU's clocks, what the caches hold) favours no place in the order: in
        one pass, the first candidate of an RMSNorm once took six times as long as
        the same row reduction with its row kept in registers
        (``benchmarks/results/2026-12-05_h100_tune_tinyllama_decode_bf16.txt``)."""
        runs = CandidateRuns(kernel, context, self.backend, self.timer)
        runs.prepare([k for k in built if k is not None])
        measured, timers, reference = [], [], None
        for position, (setting, candidate, problem) in enumerate(zip(settings, built, problems)):
            time_us, timer = None, None
            if candidate is not None:
                try:
                    outputs, timer = runs.run(candidate)
                    time_us = timer()
                except LaminaError as e:
                    problem = f"did not run: {e}"
                else:
                    if position == 0:
                        reference = outputs
                    else:
                        problem = runs.disagreement(outputs, reference)
                    time_us = None if problem else time_us
            measured.append(Measured(setting.schedule, dict(setting.knobs), setting.estimate_us, time_us, problem))
            timers.append(timer if time_us is not None else None)
            if position == 0 and time_us is None:
                break
        for position in reversed(range(len(measured))):
            if timers[position] is not None:
                again = timers[position]()
                if again < measured[position].time_us:
                    measured[position] = attrs.evolve(measured[position], time_us=again)
        return measured


def candidate_settings(kernel: loop_ir.Kernel, schedules: Sequence[Any], target: Any, count: int) -> list[Setting]:
    """The cost model's choice first (its schedule's own choice, with the knobs that would pin it), then
    the cheapest other settings the schedules offer, ``count`` in all."""
    first = cheapest(kernel, schedules, target)
    offered: list[Setting] = []
    for schedule in schedules:
        best = getattr(schedule, "best_settings", None)
        own = list(best(kernel, target, count)) if best is not None else []
        offered += own or [Setting(schedule.name, {}, estimated_us(schedule, kernel, target))]
    chosen = next(s for s in offered if s.schedule == first.name)  # a schedule's first is its own choice
    others = sorted((s for s in offered if s is not chosen), key=lambda s: s.estimate_us)
    return [chosen, *others[:count - 1]]

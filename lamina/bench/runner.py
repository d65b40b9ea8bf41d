"""Running the suite: each case checked for correctness, then lamina, eager PyTorch and
torch.compile timed side by side in this one process (PERFORMANCE.md's method).

The timing function is a parameter, so that everything but the clock can be exercised
without a GPU: ``timer(contender, figure, fn, inputs, calls)`` returns microseconds per
call of a function ``fn(*inputs)`` that makes ``calls`` calls of the contender.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Protocol

import attrs
import torch

import lamina
from lamina.bench.measure import relative_error, time_cuda_graph
from lamina.bench.suite import Case, measured_target
from lamina.core.errors import LaminaError

CONTENDERS = ("lamina", "eager", "torch.compile")
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 1e-2, torch.float16: 2e-3}
#: The wider dtype each dtype's result is checked against.
REFERENCE_DTYPE = {torch.float32: torch.float64, torch.bfloat16: torch.float32, torch.float16: torch.float32}
MAX_COLD_SETS = 256
"""Graphs of more calls than this take long to capture; cases this small get no cold figure."""
SHORT_CALL_US = 50.0
"""A call this short is mostly the graph's own launch when timed alone ..."""
CALLS_PER_SHORT_GRAPH = 20
"""... so such cases are timed again with this many back-to-back calls in one graph, per call."""
SAME_SIZE_COPY = "same-size copy"
"""The timer's name for the copy of a memory-bound case's bytes, its cold figure's ceiling."""


class Timer(Protocol):
    def __call__(self, contender: str, figure: str, fn: Callable, inputs: tuple, calls: int) -> float: ...


def cuda_graph_timer(replays: int) -> Timer:
    """Median CUDA-graph replay time per call, after warm-up."""
    def timer(contender: str, figure: str, fn: Callable, inputs: tuple, calls: int) -> float:
        return time_cuda_graph(fn, inputs, replays=replays) / calls
    return timer


@attrs.frozen
class CaseResult:
    case: Case
    status: str
    """ok, mismatch (lamina's result is wrong: not timed) or failed (lamina could not compile or run it)."""
    message: str = ""
    error: float | None = None
    tolerance: float | None = None
    #: Microseconds per call, warm L2.
    times: dict[str, float] = attrs.field(factory=dict)
    #: Back-to-back calls in each timed graph (more than one for short calls).
    hot_calls: int = 1
    #: Microseconds per call, rotating among ``cold_sets`` input sets (memory-bound cases).
    cold_times: dict[str, float] = attrs.field(factory=dict)
    cold_sets: int = 0
    #: Microseconds per call of ``copy_`` moving as many bytes as the case, timed like ``cold_times``.
    copy_cold_us: float | None = None
    #: Wall time from the call to the compiler to the end of the first call (what a user waits for).
    compile_seconds: dict[str, float] = attrs.field(factory=dict)

    def speedup(self, contender: str, figure: str = "hot") -> float | None:
        """How many times faster lamina is than ``contender``."""
        times = self.times if figure == "hot" else self.cold_times
        if "lamina" not in times or contender not in times:
            return None
        return times[contender] / times["lamina"]


def cold_set_count(case: Case, l2_bytes: int | None = None) -> int:
    """Input sets to rotate among so that the data touched between two uses of a set exceeds L2
    (the measured target's, unless ``l2_bytes`` is given); 0 if too many."""
    l2_bytes = measured_target().l2_bytes if l2_bytes is None else l2_bytes
    sets = max(2, math.ceil(2 * l2_bytes / case.bytes_moved))
    return sets if sets <= MAX_COLD_SETS else 0


def _random_inputs(case: Case, device: str, seed: int) -> tuple[torch.Tensor, ...]:
    return case.program().example_inputs(seed=seed, device=device)


def _repeated(fn: Callable, calls: int) -> Callable:
    def repeat(*inputs):
        for _ in range(calls):
            fn(*inputs)
    return repeat


def _rotating(fn: Callable, sets: list[tuple[torch.Tensor, ...]]) -> Callable:
    """One call calls ``fn`` on every set, holding each result until the last call returns.

    Each set's output thus has a buffer of its own. Dropped at once, a result's buffer would go
    to the next call, whose stores would then land on lines the previous call left in L2, and
    the cold figure would count as written to memory bytes that never left L2.
    """
    def rotate():
        return [fn(*inputs) for inputs in sets]
    return rotate


def same_size_pairs(case: Case, device: str, sets: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``sets`` pairs of float32 tensors (destination, source), each of half the bytes the case
    moves: copying one reads and writes as much as the case does. Timed cold like the case, the
    copy says what a kernel of this size can reach, which for tens of megabytes is well below
    a large copy's bandwidth."""
    elements = max(1, case.bytes_moved // 8)
    return [(torch.empty(elements, device=device), torch.randn(elements, device=device)) for _ in range(sets)]


def copy_each(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> Callable:
    """One call copies every pair's source into its destination, as a cold figure rotates among sets."""
    def copy():
        for destination, source in pairs:
            destination.copy_(source)
    return copy


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_case(case: Case, *, device: str, timer: Timer, torch_compile: Callable = torch.compile,
             seed: int = 0, l2_bytes: int | None = None) -> CaseResult:
    fn = case.program().function()
    inputs = _random_inputs(case, device, seed)
    start = time.perf_counter()
    try:
        compiled = lamina.compile(fn, inputs)
        out = compiled(*inputs)
        _synchronize(device)
    except LaminaError as e:
        return CaseResult(case, "failed", message=str(e).splitlines()[0])
    except Exception as e:  # a bug in lamina on one case must not lose the rest of the run
        return CaseResult(case, "failed", message=f"{type(e).__name__}: {e}".splitlines()[0])
    compile_seconds = {"lamina": time.perf_counter() - start}
    wider = REFERENCE_DTYPE.get(case.dtype, torch.float64)
    with torch.no_grad():
        reference = fn(*(t.to(wider) if t.is_floating_point() else t for t in inputs))
    error = relative_error(out, reference)
    tolerance = TOLERANCE.get(case.dtype, 1e-4)
    if not error <= tolerance:
        return CaseResult(case, "mismatch", message=f"relative error {error:.2e} over {tolerance:.0e}",
                          error=error, tolerance=tolerance, compile_seconds=compile_seconds)

    inductor = torch_compile(fn, dynamic=False)
    start = time.perf_counter()
    with torch.no_grad():
        inductor(*inputs)
    _synchronize(device)
    compile_seconds["torch.compile"] = time.perf_counter() - start
    contenders = {"lamina": compiled, "eager": fn, "torch.compile": inductor}
    times = {name: timer(name, "hot", f, inputs, 1) for name, f in contenders.items()}
    hot_calls = 1
    if min(times.values()) < SHORT_CALL_US:
        hot_calls = CALLS_PER_SHORT_GRAPH
        times = {name: timer(name, "hot", _repeated(f, hot_calls), inputs, hot_calls)
                 for name, f in contenders.items()}

    cold_times, copy_us, sets = {}, None, cold_set_count(case, l2_bytes) if case.memory_bound else 0
    if sets:
        rotation = [inputs] + [_random_inputs(case, device, seed + k) for k in range(1, sets)]
        cold_times = {name: timer(name, "cold", _rotating(f, rotation), (), sets) for name, f in contenders.items()}
        copy_us = timer(SAME_SIZE_COPY, "cold", copy_each(same_size_pairs(case, device, sets)), (), sets)
    return CaseResult(case, "ok", error=error, tolerance=tolerance, times=times, hot_calls=hot_calls,
                      cold_times=cold_times, cold_sets=sets, copy_cold_us=copy_us, compile_seconds=compile_seconds)


def run_suite(cases: list[Case], *, device: str, timer: Timer, torch_compile: Callable = torch.compile,
              progress: Callable[[int, int, str], None] = lambda index, total, name: None,
              measured: Callable[[list[CaseResult]], None] = lambda results: None,
              l2_bytes: int | None = None) -> list[CaseResult]:
    """Run ``cases`` in order; ``measured`` sees the results so far after each case."""
    results = []
    for index, case in enumerate(cases):
        progress(index, len(cases), case.name)
        results.append(run_case(case, device=device, timer=timer, torch_compile=torch_compile,
                                l2_bytes=l2_bytes))
        measured(results)
    progress(len(cases), len(cases), "")
    return results


def geomean_speedups(results: list[CaseResult], figure: str = "hot") -> dict[str, float]:
    """Geometric mean over the timed cases of lamina's speedup against each other contender."""
    found = {}
    for contender in CONTENDERS[1:]:
        ratios = [r for r in (result.speedup(contender, figure) for result in results) if r is not None]
        if ratios:
            found[contender] = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    return found

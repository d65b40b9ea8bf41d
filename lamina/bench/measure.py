"""Correctness and timing by the project's method.

Correctness: relative error ``||out - ref|| / ||ref||`` against eager PyTorch run in
float64. Timing: the work is captured in a CUDA graph and its replays are timed
with CUDA events after warm-up; the median is reported. This takes host overhead
out of every contender alike.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

from lamina.models.layer_counts import cuda_events


def relative_error(out: torch.Tensor, reference: torch.Tensor, chunk: int = 1 << 24) -> float:
    """``||out - ref|| / ||ref||`` in float64, inf where ``out`` has another shape or a value that is not finite.

    It is summed ``chunk`` elements at a time on ``out``'s device: a model's logits at batch 8 and 2 048
    tokens are billions of numbers, and a float64 copy of them on the host would take tens of GB."""
    if out.shape != reference.shape:
        return float("inf")
    out, reference = out.detach().reshape(-1), reference.detach().reshape(-1)
    squares = torch.zeros(2, dtype=torch.float64, device=out.device)
    for start in range(0, out.numel(), chunk):
        piece = out[start:start + chunk].to(torch.float64)
        if not torch.isfinite(piece).all():
            return float("inf")
        expected = reference[start:start + chunk].to(device=out.device, dtype=torch.float64)
        squares += torch.stack([(piece - expected).square().sum(), expected.square().sum()])
    numerator, denominator = squares.sqrt().tolist()
    return numerator if denominator == 0 else numerator / denominator


def float64_reference(fn: Callable, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """``fn`` evaluated in float64 on the CPU (integer inputs stay as they are)."""
    upcast = tuple(t.detach().cpu().double() if t.is_floating_point() else t.detach().cpu() for t in inputs)
    with torch.no_grad():
        return fn(*upcast)


def samples_within(wanted: int, seconds_each: float, budget_s: float | None, least: int) -> int:
    """``wanted``, or as many samples of ``seconds_each`` as fit in ``budget_s`` (at least ``least``).

    A whole model at batch 8 and 2 048 tokens can take seconds per call: a hundred replays of it
    would spend minutes of GPU time on a figure whose spread is far below a percent."""
    if budget_s is None or seconds_each <= 0:
        return wanted
    return max(least, min(wanted, int(budget_s / seconds_each)))


def time_cuda_graph(fn: Callable, inputs: tuple[torch.Tensor, ...], replays: int = 200, warmup: int = 10,
                    calls_per_graph: int = 1, budget_s: float | None = None) -> float:
    """Median time in microseconds of one call of ``fn(*inputs)``, from CUDA-graph replays.

    The graph holds ``calls_per_graph`` back-to-back calls and the replay time is divided
    by that number: with one call, a small program's time is mostly the graph's launch
    latency; with several, it is the device time of the call and the gaps between its
    kernels. With ``budget_s``, a call so long that ``replays`` of them would take more
    than that many seconds is replayed fewer times (``samples_within``), at least 5.
    """
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.no_grad():
        start = time.perf_counter()
        fn(*inputs)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        for _ in range(samples_within(2, seconds, budget_s, 0)):
            fn(*inputs)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        for _ in range(calls_per_graph):
            fn(*inputs)
    for _ in range(samples_within(warmup, seconds * calls_per_graph, budget_s, 1)):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(samples_within(replays, seconds * calls_per_graph, budget_s, 5)):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / calls_per_graph)
    return statistics.median(times)


def profiled_us(fn: Callable, inputs: tuple, calls: int = 20, warmup: int = 3) -> float:
    """GPU time in microseconds of one call of ``fn(*inputs)``: every kernel it launches, added up
    from the PyTorch profiler over ``calls`` calls after ``warmup`` (what a kernel's own time is,
    without the gaps between kernels that a CUDA-graph replay also counts)."""
    total = sum(e.device_time_total for e in cuda_events(fn, inputs, calls, warmup))
    return round(total / calls, 1)

"""Where a model's CUDA-graph replay leaves the GPU idle between kernels, in lamina and in torch.compile.

    python experiments/graph_gaps/gaps.py --arch bert --length 512 --layers 12 --out FILE.json

Builds the architecture at its real size (as ``benchmarks/profile_model.py`` does), compiles it
with ``torch.compile(model, backend=..., dynamic=False)``, records one call ``model(**inputs)``
in a CUDA graph (as the model suite times it) and profiles a few replays. In each replay the
span from the first kernel's start to the last one's end is the GPU's busy time plus its idle
time; the idle time is listed by the pair of kernels around each gap, largest first. A kernel
launched as a dependent of the one before (lamina's, on Hopper) may start before that one ends:
such overlap counts as busy time, not as a gap.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys

import torch

from lamina.models.architectures import ARCHITECTURES, architecture, build, example_inputs

SHOWN = 12


def replay_kernels(compiled, inputs: dict, replays: int) -> tuple[list[list[tuple[str, float, float]]], float]:
    """The kernels (name, start, end in us) of each profiled replay, and the median replay time in us."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.no_grad():
        for _ in range(3):
            compiled(**inputs)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        compiled(**inputs)
    for _ in range(10):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(50):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    runs = []
    for _ in range(replays):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profiler:
            graph.replay()
            torch.cuda.synchronize()
        runs.append(sorted(((e.name, e.time_range.start, e.time_range.end) for e in profiler.events()
                            if e.device_type == torch.autograd.DeviceType.CUDA), key=lambda k: k[1]))
    return runs, statistics.median(times)


def gaps(kernels: list[tuple[str, float, float]]) -> tuple[float, float, list[tuple[str, str, float]]]:
    """Span, busy time and each gap (kernel before, kernel after, idle us) of one replay."""
    span = kernels[-1][2] - kernels[0][1]
    busy, found, until, last = 0.0, [], kernels[0][1], kernels[0][0]
    for name, start, end in kernels:
        if start > until:
            found.append((last, name, start - until))
        busy += max(0.0, end - max(start, until))
        if end > until:
            until, last = end, name
    return span, busy, found


def measure(model, inputs, backend: str, replays: int) -> dict:
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend, dynamic=False)
    runs, replay_us = replay_kernels(compiled, inputs, replays)
    spans, busies, pairs = [], [], collections.defaultdict(float)
    for kernels in runs:
        span, busy, found = gaps(kernels)
        spans.append(span)
        busies.append(busy)
        for before, after, idle in found:
            pairs[(before[:60], after[:60])] += idle / len(runs)
    rows = sorted(pairs.items(), key=lambda item: -item[1])
    return {"replay_us": replay_us, "span_us": statistics.median(spans), "busy_us": statistics.median(busies),
            "kernels": len(runs[-1]),
            "idle_by_pair": [{"before": b, "after": a, "idle_us": t} for (b, a), t in rows[:40]]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", required=True, choices=sorted(ARCHITECTURES))
    parser.add_argument("--length", type=int, default=None)
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="bfloat16")
    parser.add_argument("--replays", type=int, default=3)
    parser.add_argument("--no-inductor", action="store_true")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    arch = architecture(args.arch)
    model = build(arch, size="real", length=args.length, layers=args.layers, dtype=getattr(torch, args.dtype),
                  device="cuda")
    inputs = example_inputs(arch, model, batch=1, length=args.length, device="cuda")
    record = {"command": "python " + " ".join(sys.argv), "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    for backend in ["lamina"] + ([] if args.no_inductor else ["inductor"]):
        found = record[backend] = measure(model, inputs, backend, args.replays)
        print(f"{backend}: replay {found['replay_us']:.1f} us; profiled span {found['span_us']:.1f}, busy "
              f"{found['busy_us']:.1f}, idle {found['span_us'] - found['busy_us']:.1f} us over {found['kernels']} kernels")
        for row in found["idle_by_pair"][:SHOWN]:
            print(f"  {row['idle_us']:7.2f} us  {row['before']}  ->  {row['after']}")
    with open(args.out, "w") as f:
        json.dump(record, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

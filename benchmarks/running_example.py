"""Time the running example, lamina against eager PyTorch and torch.compile, by PERFORMANCE.md's method.

    python benchmarks/running_example.py --out benchmarks/results/DATE_GPU_running_example.json

Checks the result against PyTorch in float64 first, then times CUDA-graph replays
(median of 200) of each contender on the same inputs, in one process.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys

import torch

import lamina
from lamina.bench.measure import float64_reference, relative_error, time_cuda_graph


def running_example(x, bias, w):
    return torch.relu(torch.matmul(x + bias, w))


def profile_kernels(fn, inputs, calls: int = 50) -> tuple[int, float]:
    """Kernels launched per call, and their summed device time per call in microseconds."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn(*inputs)
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return len(kernels) // calls, sum(e.device_time for e in kernels) / calls


def parse_variant(text: str) -> tuple[str, dict]:
    """``NAME:schedule=generic,block_k=64`` -> (NAME, settings)."""
    name, _, rest = text.partition(":")
    settings, knobs = {}, {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        if key == "schedule":
            settings["schedule"] = value
        else:
            knobs[key] = int(value)
    if knobs:
        settings["knobs"] = knobs
    return name, settings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--variant", action="append", default=[], metavar="NAME:SETTINGS",
                        help="also time lamina with these settings, e.g. small:block_m=16,block_n=16,block_k=64")
    args = parser.parse_args()

    torch.manual_seed(0)
    inputs = (torch.randn(16, 64, device="cuda"), torch.randn(64, device="cuda"), torch.randn(64, 16, device="cuda"))
    compiled = lamina.compile(running_example, inputs)
    error = relative_error(compiled(*inputs), float64_reference(running_example, inputs))
    if error >= 1e-4:
        print(f"lamina's result is wrong: relative error {error:.2e}", file=sys.stderr)
        return 1
    compiled_torch = torch.compile(running_example, dynamic=False)
    compiled_torch(*inputs)

    contenders = {"lamina": compiled, "eager": running_example, "torch.compile": compiled_torch}
    for text in args.variant:
        name, settings = parse_variant(text)
        variant = lamina.compile(running_example, inputs, **settings)
        if relative_error(variant(*inputs), float64_reference(running_example, inputs)) >= 1e-4:
            print(f"variant {name} gives a wrong result", file=sys.stderr)
            return 1
        contenders[f"lamina {name} ({text.partition(':')[2]})"] = variant
    rows = {}
    for name, fn in contenders.items():
        kernels, device_us = profile_kernels(fn, inputs)
        rows[name] = {
            "replay_us": time_cuda_graph(fn, inputs, replays=500),
            "per_call_us_20_per_graph": time_cuda_graph(fn, inputs, replays=500, calls_per_graph=20),
            "kernels": kernels,
            "kernel_device_us": device_us,
        }
    result = {
        "suite": "running_example",
        "command": " ".join(["python", "benchmarks/running_example.py", "--out", f"benchmarks/results/{os.path.basename(args.out)}"]
                            + [f"--variant {v}" for v in args.variant]),
        "date": datetime.date.today().isoformat(),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "method": (
            "CUDA-graph replay timed with CUDA events after warm-up, median of 500 replays: replay_us with one "
            "call per graph (mostly launch latency for a program this small), per_call_us_20_per_graph with 20 "
            "back-to-back calls per graph, divided by 20; kernel_device_us is the summed device time of the "
            "call's kernels from the PyTorch profiler, mean of 50 calls"
        ),
        "relative_error": error,
        "schedules": [t.schedule for t in compiled.compilation.tiles],
        "results": rows,
        "speedup_per_call_vs_eager": rows["eager"]["per_call_us_20_per_graph"] / rows["lamina"]["per_call_us_20_per_graph"],
        "speedup_per_call_vs_torch_compile": rows["torch.compile"]["per_call_us_20_per_graph"] / rows["lamina"]["per_call_us_20_per_graph"],
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    for name, row in rows.items():
        print(f"{name:44s} replay {row['replay_us']:6.2f} us  per call {row['per_call_us_20_per_graph']:6.2f} us"
              f"  device {row['kernel_device_us']:5.2f} us in {row['kernels']} kernel(s)")
    print(f"relative error {error:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

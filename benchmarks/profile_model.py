"""Where a compiled model's forward pass spends its GPU time, kernel by kernel.

    python benchmarks/profile_model.py --model tinyllama --layers 2 --seq 512 --dtype bfloat16 \
        --out benchmarks/results/DATE_GPU_profile_tinyllama.json

Compiles the model with lamina, runs it once to load the kernels, then profiles a few
forward passes with torch.profiler and sums the device time of each kernel (lamina
kernel is named after its Loop IR kernel by launch order, with its schedule beside it).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import torch

import lamina
from lamina.models import MODELS, build_model, random_input_ids


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=list(MODELS), default="tinyllama")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="bfloat16")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks/profile_model.py needs a CUDA GPU", file=sys.stderr)
        return 2
    config = MODELS[args.model]
    model = build_model(config, num_layers=args.layers, dtype=getattr(torch, args.dtype), device="cuda")
    ids = random_input_ids(config, args.seq, device="cuda")
    compiled = lamina.compile(model, (ids,))
    schedules = {t.kernel.name: t.schedule for t in compiled.compilation.tiles}
    with torch.no_grad():
        compiled(ids)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
            for _ in range(args.passes):
                compiled(ids)
            torch.cuda.synchronize()
    launched = [k.name for k in compiled.compilation.kernels.kernels]
    events = sorted((e for e in profile.events() if e.device_type == torch.autograd.DeviceType.CUDA
                     and "lamina_kernel" in e.name), key=lambda e: e.time_range.start)
    if len(events) != len(launched) * args.passes:
        print(f"the profiler saw {len(events)} lamina kernels, not {len(launched)} x {args.passes}", file=sys.stderr)
        return 1
    per_kernel: dict[str, float] = collections.defaultdict(float)
    per_schedule: dict[str, float] = collections.defaultdict(float)
    for position, event in enumerate(events):
        name = launched[position % len(launched)]
        per_kernel[name] += event.device_time / args.passes
        per_schedule[schedules[name]] += event.device_time / args.passes
    total = sum(per_kernel.values())
    rows = sorted(per_kernel.items(), key=lambda item: -item[1])
    record = {
        "command": f"python benchmarks/profile_model.py --model {args.model} --layers {args.layers} --seq {args.seq} "
                   f"--dtype {args.dtype} --passes {args.passes} --out benchmarks/results/{Path(args.out).name}",
        "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
        "total_us_per_pass": total,
        "per_schedule_us": dict(per_schedule),
        "kernels": [{"kernel": name, "schedule": schedules[name], "us_per_pass": us, "share": us / total}
                    for name, us in rows],
    }
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    print(f"{total / 1000:.2f} ms of kernels per forward pass; by schedule: "
          + ", ".join(f"{name} {us / 1000:.2f} ms" for name, us in per_schedule.items()))
    for name, us in rows[:15]:
        print(f"{us:10.1f} us  {us / total:5.1%}  {schedules[name]:13s}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

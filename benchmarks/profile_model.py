"""Where a model's forward pass spends its GPU time, kernel by kernel, in lamina and in torch.compile.

    python benchmarks/profile_model.py --arch llama --batch 1 --length 512 --layers 2 --dtype bfloat16 \\
        --out benchmarks/results/DATE_h200_profile_llama_b1_s512_bf16.json

Builds an architecture of the model matrix (``lamina models``) at its real size with ``--layers``
of its layers (``--size small`` for the scaled-down one), compiles it as its users do,
``torch.compile(model, backend="lamina", dynamic=False)`` called as ``model(**inputs)``, runs it
twice, then profiles ``--passes`` forward passes with torch.profiler and sums each GPU kernel's
time per pass by the kernel's name. A kernel's time is what it adds to the GPU's busy time: from
its start, or the end of the kernel before it where they overlap, to its end (``own_times``). On
Hopper lamina launches each kernel while the one before it finishes, its blocks waiting for it
(dependent launch): counted from its start, a kernel's time would include that wait (a split-K
combine of 3 us showed 26, the wait for its product), and the kernels' times would add up to
more than the pass. A lamina kernel is named after what it computes
(``linear_sum``), and the kernels of a model's layers that compile to the same code share the
first one's name, so a line adds up those layers' launches (kernels of other code under the same
name are numbered: ``mul``, ``mul_2``). torch.compile's default backend is
profiled beside it (``--no-inductor`` leaves it out).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import torch

from lamina.models.architectures import ARCHITECTURES, architecture, build, example_inputs

SHOWN = 15
"""Kernels printed per contender, the costliest first (the record keeps all)."""


def kernel_spans(model: torch.nn.Module, inputs: dict, backend: str, passes: int) -> list[tuple[str, float, float]]:
    """Every GPU kernel of ``passes`` forward passes of ``model`` compiled by ``backend`` (after two
    passes that compile and warm it), as (name, start, end) in microseconds."""
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend, dynamic=False)
    with torch.no_grad():
        for _ in range(2):
            compiled(**inputs)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profiler:
            for _ in range(passes):
                compiled(**inputs)
            torch.cuda.synchronize()
    return [(event.name, event.time_range.start, event.time_range.end) for event in profiler.events()
            if event.device_type == torch.autograd.DeviceType.CUDA]


def profile(model: torch.nn.Module, inputs: dict, backend: str, passes: int) -> dict:
    """GPU time per pass of each kernel name, and its launches per pass, of ``model`` compiled by ``backend``."""
    kernels = kernel_spans(model, inputs, backend, passes)
    us: dict[str, float] = collections.defaultdict(float)
    launches: dict[str, int] = collections.defaultdict(int)
    for name, own in own_times(kernels):
        us[name] += own / passes
        launches[name] += 1
    total = sum(us.values())
    rows = sorted(us.items(), key=lambda item: -item[1])
    return {"total_us_per_pass": total,
            "kernels": [{"kernel": name, "us_per_pass": t, "share": t / total, "launches_per_pass": launches[name] / passes}
                        for name, t in rows]}


def own_times(kernels: list[tuple[str, float, float]]) -> list[tuple[str, float]]:
    """Each kernel's (name, start, end) as (name, the time it adds to the GPU's busy time): its end less
    its start or the latest end of the kernels that started before it, whichever is later (none
    where it ends inside one of them)."""
    out, busy_until = [], float("-inf")
    for name, start, end in sorted(kernels, key=lambda k: k[1]):
        out.append((name, max(0.0, end - max(start, busy_until))))
        busy_until = max(busy_until, end)
    return out


def print_profile(contender: str, record: dict) -> None:
    kernels = record["kernels"]
    print(f"{contender}: {record['total_us_per_pass'] / 1000:.3f} ms of GPU time per forward pass, {len(kernels)} kernels")
    for row in kernels[:SHOWN]:
        print(f"  {row['us_per_pass']:10.1f} us  {row['share']:6.1%}  x{row['launches_per_pass']:<4g} {row['kernel'][:100]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", required=True, choices=sorted(ARCHITECTURES))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--length", type=int, default=None, help="tokens (the architecture's first length if left out)")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--size", choices=["real", "small"], default="real")
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="bfloat16")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--no-inductor", action="store_true", help="profile lamina alone")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks/profile_model.py needs a CUDA GPU", file=sys.stderr)
        return 2
    arch = architecture(args.arch)
    model = build(arch, size=args.size, length=args.length, layers=args.layers, dtype=getattr(torch, args.dtype),
                  device="cuda")
    inputs = example_inputs(arch, model, batch=args.batch, length=args.length, device="cuda")
    contenders = ["lamina"] + ([] if args.no_inductor else ["inductor"])
    record = {
        "command": (f"python benchmarks/profile_model.py --arch {args.arch} --batch {args.batch}"
                    + (f" --length {args.length}" if args.length else "")
                    + f" --layers {args.layers} --size {args.size} --dtype {args.dtype} --passes {args.passes}"
                    + (" --no-inductor" if args.no_inductor else "")
                    + f" --out benchmarks/results/{Path(args.out).name}"),
        "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
        "model": {"arch": args.arch, "size": args.size, "layers": args.layers, "batch": args.batch,
                  "length": args.length, "dtype": args.dtype},
    }
    for contender in contenders:
        record[contender] = profile(model, inputs, contender, args.passes)
        print_profile("torch.compile" if contender == "inductor" else "lamina", record[contender])
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

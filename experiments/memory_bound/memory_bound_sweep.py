"""Time the memory-bound cases of the suite under pinned schedule knobs, beside the default choice.

    python experiments/memory_bound/memory_bound_sweep.py --out experiments/memory_bound/DATE_GPU_memory_bound_sweep.json

For each memory-bound case selected (S=2048 by default), lamina compiles it once with
the knobs it chooses and once per setting of ``--knob NAME=V1,V2,...`` (every
combination), and each is timed warm and cold (rotating among input sets that overflow
L2) by CUDA-graph replay, by the method of ``lamina bench``. The record shows which
settings move the cold figure towards the copy ceiling: the evidence for a schedule's
defaults. Beside them, a device-to-device copy that reads and writes as many bytes as
the case moves is timed the same way: the ceiling a kernel of that size can reach, which
for a few tens of megabytes is well below the 4.27 TB/s of a large copy.
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import itertools
import json
import sys
from pathlib import Path

import torch

import lamina
from lamina.bench.measure import relative_error, time_cuda_graph
from lamina.bench.runner import REFERENCE_DTYPE, _rotating, cold_set_count, copy_each, same_size_pairs
from lamina.bench.suite import builtin_suite
from lamina.core.errors import LaminaError

COPY_CEILING_BYTES_PER_US = 4.27e6


def knob_settings(items: list[str]) -> list[dict[str, int]]:
    """Every combination of ``NAME=V1,V2`` items, as knob tables."""
    axes = []
    for item in items:
        name, _, values = item.partition("=")
        axes.append([(name, int(v)) for v in values.split(",")])
    return [dict(combo) for combo in itertools.product(*axes)] if axes else []


def time_setting(case, fn, inputs, rotation, knobs: dict, replays: int) -> dict:
    try:
        compiled = lamina.Compiler(knobs=knobs).compile(fn, inputs)
    except LaminaError as error:
        return {"knobs": knobs, "error": str(error).splitlines()[0]}
    wider = REFERENCE_DTYPE.get(case.dtype, torch.float64)
    with torch.no_grad():
        reference = fn(*(t.to(wider) if t.is_floating_point() else t for t in inputs))
    warm = time_cuda_graph(compiled, inputs, replays=replays)
    cold = time_cuda_graph(_rotating(compiled, rotation), (), replays=replays) / len(rotation)
    tiles = [t for t in compiled.compilation.tiles]
    return {"knobs": knobs, "relative_error": relative_error(compiled(*inputs), reference), "warm_us": warm,
            "cold_us": cold, "cold_fraction_of_copy": case.bytes_moved / cold / COPY_CEILING_BYTES_PER_US,
            "tile_ir": [lamina.core.ir.tile_ir.format_tile_kernel(t) for t in tiles]}


def time_copy_of_the_same_bytes(case, sets: int, replays: int) -> dict:
    """A ``copy_`` that reads half the case's bytes and writes the other half, warm and cold."""
    pairs = same_size_pairs(case, "cuda", sets)
    warm = time_cuda_graph(copy_each(pairs[:1]), (), replays=replays)
    cold = time_cuda_graph(copy_each(pairs), (), replays=replays) / len(pairs)
    return {"warm_us": warm, "cold_us": cold, "cold_fraction_of_copy": case.bytes_moved / cold / COPY_CEILING_BYTES_PER_US}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--filter", action="append", default=[], help="glob over case names (default *.s2048.*)")
    parser.add_argument("--knob", action="append", default=[], metavar="NAME=V1,V2")
    parser.add_argument("--replays", type=int, default=50)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("experiments/memory_bound/memory_bound_sweep.py needs a CUDA GPU", file=sys.stderr)
        return 2
    patterns = args.filter or ["*.s2048.*"]
    cases = [c for c in builtin_suite() if c.memory_bound and any(fnmatch.fnmatch(c.name, p) for p in patterns)]
    command = "python experiments/memory_bound/memory_bound_sweep.py " + " ".join(
        [f"--out experiments/memory_bound/{Path(args.out).name}"] + [f"--filter '{p}'" for p in args.filter]
        + [f"--knob {k}" for k in args.knob] + [f"--replays {args.replays}"])
    record = {"command": command, "date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
              "cases": []}
    for case in cases:
        fn = case.program().function()
        inputs = case.program().example_inputs(seed=0, device="cuda")
        sets = max(cold_set_count(case), 2)
        rotation = [inputs] + [case.program().example_inputs(seed=k, device="cuda") for k in range(1, sets)]
        rows = [dict(time_setting(case, fn, inputs, rotation, {}, args.replays), default=True)]
        rows += [time_setting(case, fn, inputs, rotation, knobs, args.replays) for knobs in knob_settings(args.knob)]
        timed = [r for r in rows if "cold_us" in r]
        best = min(timed, key=lambda r: r["cold_us"])
        copy = time_copy_of_the_same_bytes(case, sets, args.replays)
        record["cases"].append({"case": case.name, "bytes": case.bytes_moved, "settings": rows,
                                "copy_of_the_same_bytes": copy})
        print(f"{case.name}: default cold {rows[0].get('cold_us', float('nan')):.1f} us "
              f"({rows[0].get('cold_fraction_of_copy', 0):.0%}), best cold {best['cold_us']:.1f} us "
              f"({best['cold_fraction_of_copy']:.0%}) with {best['knobs']}; a copy of the same bytes "
              f"{copy['cold_us']:.1f} us ({copy['cold_fraction_of_copy']:.0%})", flush=True)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

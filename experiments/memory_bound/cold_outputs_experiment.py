"""Did the cold figure flatter a case when each call's output went where the previous call's
went? ``lamina bench`` rotated among input sets that overflow L2 but dropped each call's result,
so the allocator handed the next call the same output buffer, whose lines the previous call
had left in L2. Here each memory-bound case is timed cold both ways, for lamina and
torch.compile: dropping each result, and holding every result until the rotation ends (as the
bench now does), so that every set's output has its own buffer and every byte written goes out
to memory.

    python experiments/memory_bound/cold_outputs_experiment.py --out experiments/memory_bound/DATE_GPU_cold_outputs.json
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import json
import sys
from pathlib import Path

import torch

import lamina
from lamina.bench.measure import time_cuda_graph
from lamina.bench.runner import _rotating, cold_set_count
from lamina.bench.suite import builtin_suite

COPY_CEILING_BYTES_PER_US = 4.27e6


def rotating_into_one_output(fn, sets):
    """The bench's rotation before it held its results: each result dropped as soon as it is made."""
    def rotate():
        for inputs in sets:
            fn(*inputs)
    return rotate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--filter", default="*.fp32", help="glob over case names")
    parser.add_argument("--replays", type=int, default=100)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("experiments/memory_bound/cold_outputs_experiment.py needs a CUDA GPU", file=sys.stderr)
        return 2
    record = {"command": f"python experiments/memory_bound/cold_outputs_experiment.py --out experiments/memory_bound/{Path(args.out).name}"
                         f" --filter '{args.filter}' --replays {args.replays}",
              "date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(), "rows": []}
    for case in builtin_suite():
        sets = cold_set_count(case) if case.memory_bound else 0
        if not sets or not fnmatch.fnmatch(case.name, args.filter):
            continue
        fn = case.program().function()
        rotation = [case.program().example_inputs(seed=k, device="cuda") for k in range(sets)]
        contenders = {"lamina": lamina.compile(fn, rotation[0]), "torch.compile": torch.compile(fn, dynamic=False)}
        row = {"name": case.name, "bytes": case.bytes_moved, "sets": sets}
        line = f"{case.name:36s} {sets:3d} sets"
        for name, f in contenders.items():
            with torch.no_grad():
                f(*rotation[0])
                reused = time_cuda_graph(rotating_into_one_output(f, rotation), (), replays=args.replays) / sets
                own = time_cuda_graph(_rotating(f, rotation), (), replays=args.replays) / sets
            row[name] = {"reused_output_us": reused, "own_outputs_us": own}
            line += (f"  {name}: {reused:7.2f} us ({case.bytes_moved / reused / COPY_CEILING_BYTES_PER_US:4.0%})"
                     f" -> {own:7.2f} us ({case.bytes_moved / own / COPY_CEILING_BYTES_PER_US:4.0%})")
        record["rows"].append(row)
        print(line, flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

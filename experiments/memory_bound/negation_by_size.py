"""What the simplest kernel lamina emits reaches, cold, at the sizes of the suite's memory-bound
cases: the negation of a float32 tensor of half a case's bytes (it reads that half and writes
the other), timed as ``lamina bench`` times a case cold, beside ``copy_`` of the same bytes
and the case itself. Where even the negation stays short of 90 % of the 4.27 TB/s that a large
copy reaches, what holds the case back is its size rather than its schedule.

    python experiments/memory_bound/negation_by_size.py --out experiments/memory_bound/DATE_GPU_negation_by_size.json
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import json
import math
import sys
from pathlib import Path

import torch

import lamina
from lamina.bench.measure import time_cuda_graph
from lamina.bench.runner import _rotating, cold_set_count, copy_each
from lamina.bench.suite import builtin_suite, measured_target

COPY_CEILING_BYTES_PER_US = 4.27e6
LARGE_BYTES = (256 << 20, 1 << 30)
"""Sizes well past L2, where a kernel's start and end weigh little."""


def negate(x):
    return -x


def cold_us(fn, rotation: list[tuple], replays: int) -> float:
    return time_cuda_graph(_rotating(fn, rotation), (), replays=replays) / len(rotation)


def negation_and_copy(bytes_moved: int, replays: int) -> dict:
    elements = bytes_moved // 8
    sets = max(2, math.ceil(2 * measured_target().l2_bytes / bytes_moved))
    sources = [(torch.randn(elements, device="cuda"),) for _ in range(sets)]
    compiled = lamina.compile(negate, sources[0])
    assert torch.equal(compiled(*sources[0]), -sources[0][0])
    pairs = [(torch.empty_like(x), x) for (x,) in sources]
    negation = cold_us(compiled, sources, replays)
    copy = time_cuda_graph(copy_each(pairs), (), replays=replays) / sets
    return {"bytes": bytes_moved, "sets": sets, "negation_cold_us": negation, "copy_cold_us": copy,
            "negation_fraction_of_copy": bytes_moved / negation / COPY_CEILING_BYTES_PER_US,
            "copy_fraction_of_copy": bytes_moved / copy / COPY_CEILING_BYTES_PER_US}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--filter", default="*.s2048.fp32", help="glob over case names")
    parser.add_argument("--replays", type=int, default=100)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("experiments/memory_bound/negation_by_size.py needs a CUDA GPU", file=sys.stderr)
        return 2
    record = {"command": f"python experiments/memory_bound/negation_by_size.py --out experiments/memory_bound/{Path(args.out).name}"
                         f" --filter '{args.filter}' --replays {args.replays}",
              "date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(), "rows": []}
    cases = [c for c in builtin_suite() if c.memory_bound and fnmatch.fnmatch(c.name, args.filter)]
    for case in [*cases, *LARGE_BYTES]:
        if isinstance(case, int):
            name, row = f"{case >> 20} MiB", negation_and_copy(case, args.replays)
        else:
            name, row = case.name, negation_and_copy(case.bytes_moved, args.replays)
            sets = cold_set_count(case)
            rotation = [case.program().example_inputs(seed=k, device="cuda") for k in range(sets)]
            compiled = lamina.compile(case.program().function(), rotation[0])
            row["case_cold_us"] = cold_us(compiled, rotation, args.replays)
            row["case_fraction_of_copy"] = case.bytes_moved / row["case_cold_us"] / COPY_CEILING_BYTES_PER_US
        record["rows"].append({"name": name, **row})
        case_text = f", the case {row['case_fraction_of_copy']:.0%}" if "case_cold_us" in row else ""
        print(f"{name:32s} {row['bytes'] / 1e6:7.1f} MB, {row['sets']} sets: negation {row['negation_cold_us']:7.2f} us "
              f"({row['negation_fraction_of_copy']:.0%}), copy_ {row['copy_cold_us']:7.2f} us "
              f"({row['copy_fraction_of_copy']:.0%}){case_text}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

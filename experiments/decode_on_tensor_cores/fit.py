"""Refit the decode cost model's latency constants to a sweep's measurements, on the CPU.

    python experiments/decode_on_tensor_cores/fit.py experiments/decode_on_tensor_cores/2026-12-06_h100_sweep.json

Each sweep case is compiled for sm_90 on the CPU to recover what the schedule weighs (its
``DecodeAttention``); each measured setting (the cost model's choices and the pinned key ranges)
is estimated under a grid of ``TILE_LATENCY_US``, ``COMBINE_US``, ``WAVE_US`` and ``LAUNCH_US`` (which
moves every estimate alike), with the combining counted per range and pair of outputs (as the
schedule counts it) or per range alone. A setting of the constants counts where, among the measured settings of a case, the cheapest estimate is the
fastest measured, and the geometric mean of the measured time of its pick over the best measured;
of those that pick the best in all but one case of the most found, at most 5 % off it, the one
whose estimates are closest to the measurements wins. Printed: the best few settings of the
constants, and what the best one picks for each case from every setting the schedule weighs
(measured or not).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import sys

import torch
import torch.nn.functional as F

import lamina
from lamina.plugins.schedules.attention.decode import tiling

CASES = {"tinyllama": (32, 4, 64), "qwen": (28, 4, 128), "gemma": (8, 1, 256)}
CHOSEN = re.compile(r"(\d+) keys per block in tiles of (\d+), (\d+) stages, .*products on the (cuda|tensor) cores")


def attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


def weighed(case: str):
    """The schedule's ``DecodeAttention`` and target for a sweep case, from a CPU compile for sm_90."""
    name, cache = case.split(".c")
    heads, kv_heads, depth = CASES[name]
    q = torch.randn(1, heads, 1, depth, dtype=torch.bfloat16)
    k = torch.randn(1, kv_heads, int(cache), depth, dtype=torch.bfloat16)
    seen = []
    original = tiling.ranked

    def spy(d, target, knobs):
        seen.append((d, target))
        return original(d, target, knobs)

    tiling.ranked = spy
    try:
        lamina.compile(attention, (q, k, torch.randn_like(k)), target="sm_90")
    finally:
        tiling.ranked = original
    return seen[-1]


def measured(row) -> list[tuple[tiling.DecodeChoice, float]]:
    out = []
    for setting in row["settings"]:
        found = CHOSEN.match(setting["chosen"])
        if found:
            keys, tile, stages, products = found.groups()
            out.append((tiling.DecodeChoice(int(keys), int(tile), int(stages), f"{products}_cores"), setting["us"]))
    return out


def main() -> int:
    sweep = json.load(open(sys.argv[1]))
    cases = [(row["case"], *weighed(row["case"]), measured(row)) for row in sweep["cases"]]
    names = ("TILE_LATENCY_US", "COMBINE_US", "WAVE_US", "LAUNCH_US")
    originals = {n: getattr(tiling, n) for n in names}
    per_pair = tiling.combining_us
    variants = {"per range and pair (as now)": per_pair,
                "per range": lambda d, splits: tiling.COMBINE_US * splits if splits > 1 else 0.0}
    scored = []
    for (variant, combining), values in itertools.product(
            variants.items(), itertools.product((0.4, 0.6, 0.8, 1.0, 1.2, 1.6), (0.0, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2),
                                                (0.5, 1.0, 1.5, 2.0, 3.0), (2.0, 3.0, 4.0, 5.0))):
        tiling.combining_us = combining
        for n, v in zip(names, values):
            setattr(tiling, n, v)
        hits, regrets, errors = 0, [], []
        for _, d, target, points in cases:
            estimates = [tiling.estimate_us(d, c, target) for c, _ in points]
            pick = points[estimates.index(min(estimates))]
            best = min(us for _, us in points)
            hits += pick[1] == best
            regrets.append(pick[1] / best)
            errors += [math.log(e / us) ** 2 for e, (_, us) in zip(estimates, points)]
        scored.append((-hits, round(math.exp(sum(map(math.log, regrets)) / len(regrets)), 3),
                       math.sqrt(sum(errors) / len(errors)), variant, values))
    # the closest estimates among the settings of the constants that pick well
    most = max(-s[0] for s in scored)
    scored = sorted((s for s in scored if -s[0] >= most - 1 and s[1] <= 1.05), key=lambda s: s[2])
    for hits, regret, error, variant, values in scored[:10]:
        print(f"{variant}, {dict(zip(names, values))}: best measured picked in {-hits} of {len(cases)}, "
              f"regret {regret:.3f}, estimates off by {math.exp(error):.2f}x (geometric rms)")
    best_variant, best_values = scored[0][3], scored[0][4]
    print(f"as now {originals}:")
    for label, combining, values in (("now", per_pair, tuple(originals.values())),
                                     (f"refit, {best_variant}", variants[best_variant], best_values)):
        tiling.combining_us = combining
        for n, v in zip(names, values):
            setattr(tiling, n, v)
        print(f"{label}:")
        for case, d, target, points in cases:
            estimate, choice = tiling.ranked(d, target, {})[0]
            times = {c: us for c, us in points}
            print(f"  {case:16s} {choice.keys_per_block:5d} keys, tiles {choice.keys_per_tile}, {choice.stages} stages, "
                  f"{choice.products}: est {estimate:5.1f} us, measured {times.get(choice, float('nan')):5.1f}; "
                  f"best measured {min(times.values()):5.1f}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("LAMINA_PROGRAM_CACHE", "0")
    sys.exit(main())

"""How well the Hopper GEMM's cost model predicts the settings of one kernel each (``split_k = 1``)
that ``time_rings.py`` timed, for several values of its light-load speedup:
``python experiments/deep_rings/fit.py experiments/deep_rings/2026-12-06_h100_rings.json`` on the CPU
(nothing runs; the H200 target's constants with the H100's memory bandwidth). Prints each setting's
time against its estimate, and the root mean square of their log ratio."""
import json
import math
import os
import sys

import attrs

os.environ["LAMINA_PROGRAM_CACHE"] = "0"
import lamina  # noqa: E402
import lamina.plugins.schedules.contraction.cost as contraction_cost  # noqa: E402
import lamina.plugins.schedules.contraction.wgmma_tma.cost as tma_cost  # noqa: E402
from lamina.backends.cuda.targets import SM90  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from time_rings import SETTINGS, cases, setting_name  # noqa: E402

H100 = attrs.evolve(SM90, memory_bytes_per_us=3.35e6)
measured = json.load(open(sys.argv[1]))
weighed = []
original = tma_cost.compute_and_memory_us


def recording(c, choices, target):
    weighed.append((c, choices))
    return original(c, choices, target)


tma_cost.compute_and_memory_us = recording
points = []
for case, (fn, args) in cases("cpu").items():
    for pins in SETTINGS:
        result = measured.get(f"{case} | {setting_name(pins)}")
        if pins is None or pins.get("split_k") != 1 or pins.get("cluster_slices", 1) > 1 or not isinstance(result, dict):
            continue
        weighed.clear()
        lamina.Compiler(target="sm_90", knobs={"contraction": pins}).specialize(fn, args)
        c, choices = next((c, ch) for c, ch in reversed(weighed)
                          if (ch.block_m, ch.block_n, ch.stages) == (pins["block_m"], pins["block_n"], pins["stages"]))
        points.append((case, setting_name(pins), result["us"], c, choices))
tma_cost.compute_and_memory_us = original
chosen = tma_cost.LIGHT_LOAD_SPEEDUP
for speedup in sorted({1.0, 1.3, 1.5, chosen, 2.0}):
    tma_cost.LIGHT_LOAD_SPEEDUP = speedup
    errors = []
    for case, name, us, c, choices in points:
        estimate = contraction_cost.estimate(c, choices, H100).total_us
        errors.append(math.log(estimate / us))
        if speedup == chosen:
            print(f"{case:38s} {name:62s} {us:7.2f} us, estimated {estimate:7.2f}")
    rms = math.sqrt(sum(e * e for e in errors) / len(errors))
    print(f"light-load speedup {speedup}: {len(points)} settings, rms of log(estimate / measured) {rms:.3f}")

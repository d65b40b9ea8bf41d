"""How well the Hopper GEMM's cost model ranks the settings timed by ``deep_rings/time_rings.py`` (H100)
and ``light_load/time_products.py`` (H200) under shapes of its light-load speedup:
``python experiments/light_load/fit.py`` on the CPU (nothing runs). For each shape, the root mean
square of log(estimate / measured) over the settings of one kernel each, and the regret: the
measured time of the setting the model ranks first among those timed, over the fastest's (geomean
and worst over the products). ``-v`` prints each product's pick under the kept shape."""
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

HERE = os.path.dirname(__file__)
sys.path[:0] = [HERE, os.path.join(HERE, "..", "deep_rings")]
import time_products  # noqa: E402
import time_rings  # noqa: E402

H100 = attrs.evolve(SM90, memory_bytes_per_us=3.35e6)


def timed_settings(module, record: str, target) -> list[tuple]:
    """(product, setting, measured us, contraction, choices, target) of each setting of one kernel."""
    measured = json.load(open(record))
    weighed, original = [], tma_cost.compute_and_memory_us

    def recording(c, choices, target):
        weighed.append((c, choices))
        return original(c, choices, target)

    tma_cost.compute_and_memory_us = recording
    points = []
    try:
        for case, (fn, args) in module.cases("cpu").items():
            for pins in module.SETTINGS:
                result = measured.get(f"{case} | {module.setting_name(pins)}")
                if pins is None or pins.get("split_k") != 1 or pins.get("cluster_slices", 1) > 1 \
                        or not isinstance(result, dict):
                    continue
                weighed.clear()
                lamina.Compiler(target="sm_90", knobs={"contraction": pins}).specialize(fn, args)
                c, choices = next((c, ch) for c, ch in reversed(weighed) if (
                    ch.block_m, ch.block_n, ch.stages, ch.consumer_warpgroups) == (
                    pins["block_m"], pins["block_n"], pins["stages"], pins["consumer_warpgroups"]))
                points.append((case, module.setting_name(pins), result["us"], c, choices, target))
    finally:
        tma_cost.compute_and_memory_us = original
    return points


def evaluate(label: str, speedup, points: list[tuple], verbose: bool = False) -> None:
    tma_cost.light_load_speedup = speedup
    errors, by_product = [], {}
    for case, name, us, c, choices, target in points:
        estimate = contraction_cost.estimate(c, choices, target).total_us
        errors.append(math.log(estimate / us))
        by_product.setdefault(case, []).append((estimate, us, name))
    regrets = []
    for case, rows in by_product.items():
        _, picked_us, picked = min(rows)
        best = min(us for _, us, _ in rows)
        regrets.append(picked_us / best)
        if verbose:
            print(f"   {case:38s} picks {picked:62s} {picked_us:7.2f} us, fastest {best:7.2f}")
    rms = math.sqrt(sum(e * e for e in errors) / len(errors))
    geomean = math.exp(sum(map(math.log, regrets)) / len(regrets))
    print(f"{label:34s} rms {rms:.3f}, regret geomean {geomean:.4f}, worst {max(regrets):.3f}")


def main() -> None:
    points = timed_settings(time_rings, os.path.join(HERE, "..", "deep_rings", "2026-12-06_h100_rings.json"), H100)
    points += timed_settings(time_products, os.path.join(HERE, "2026-12-06_h200_bert_products.json"), SM90)
    print(f"{len(points)} settings")
    kept = tma_cost.light_load_speedup
    for s in (1.0, 1.3, 1.7, 2.0):
        evaluate(f"linear, {s} on one SM", lambda busy, n, s=s: 1 + (s - 1) * (1 - busy / n), points)
    for s in (1.7, 2.0, 2.5, 3.0):
        for power in (1.5, 2, 3):
            evaluate(f"idle share ** {power}, {s} on one SM",
                     lambda busy, n, s=s, p=power: 1 + (s - 1) * (1 - busy / n) ** p, points)
    evaluate("kept (light_load_speedup)", kept, points, verbose="-v" in sys.argv)


if __name__ == "__main__":
    main()

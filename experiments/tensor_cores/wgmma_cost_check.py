"""How well the contraction cost model's wgmma estimates match measured times, and whether it ranks
the blocks as the GPU does.

    python experiments/tensor_cores/wgmma_cost_check.py \\
        experiments/tensor_cores/2026-11-30_h200_wgmma_blocks_overlapped_b_split.json \\
        experiments/tensor_cores/2026-11-30_h200_tensor_core_experiment_wgmma_overlapped_b_split.json

Reads records of ``experiments/tensor_cores/tensor_core_experiment.py`` with settings ``wgmma 128x64``,
``wgmma 128x128``, ``wgmma 64x64`` and ``wgmma 64x128`` (the fastest of a product and block
over the files counts), and for the suite's M = 2048 linears and the scores' products prints,
per block, the measured time beside ``cost.estimate`` for the block's one wgmma setting
(three buffers); then, per product, the block the model ranks first against the fastest
measured, and the mean error. Needs no GPU. The linears at M = 128 are left out: the model
runs them in split-K slices, which these settings do not pin.
"""

from __future__ import annotations

import json
import sys

from lamina.backends.cuda.targets import SM90 as SM_90
from lamina.plugins.schedules.contraction import analyse, cost
from lamina.plugins.schedules.contraction.wgmma import products as warpgroup_products
from lamina.plugins.schedules.contraction.recognise import Contraction

sys.path.insert(0, ".")
from tests.plugins.schedules.contraction_kernels import batched_scores, linear  # noqa: E402

BLOCKS = {"wgmma 128x64": (128, 64), "wgmma 128x128": (128, 128), "wgmma 64x64": (64, 64),
          "wgmma 64x128": (64, 128)}
LINEARS = {"tl.qkv": (2560, 2048), "tl.o": (2048, 2048), "tl.gate_up": (11264, 2048), "tl.down": (2048, 5632),
           "qw.qkv": (4608, 3584), "qw.o": (3584, 3584), "qw.gate_up": (37888, 3584), "qw.down": (3584, 18944)}
"""(N, K) of each linear, as in ``experiments/tensor_cores/tensor_core_experiment.py``."""
SCORES = {"tl.scores": (32, 64), "qw.scores": (28, 128)}


def products() -> dict[str, Contraction]:
    found = {f"{name}.m2048": analyse(linear(2048, k, n).kernel) for name, (n, k) in LINEARS.items()}
    found.update({name: analyse(batched_scores(heads, 2048, size, 2048).kernel)
                  for name, (heads, size) in SCORES.items()})
    return found


def measured(paths: list[str]) -> dict[tuple[str, tuple[int, int]], float]:
    times: dict[tuple[str, tuple[int, int]], float] = {}
    for path in paths:
        for row in json.loads(open(path).read())["rows"]:
            for label, setting in row["settings"].items():
                if label in BLOCKS:
                    key = (row["case"], BLOCKS[label])
                    times[key] = min(times.get(key, float("inf")), setting["us"])
    return times


def main(paths: list[str]) -> int:
    times, errors = measured(paths), []
    for name, c in products().items():
        rows = []
        for shape in BLOCKS.values():
            if (name, shape) not in times:
                continue
            estimate = cost.estimate(c, warpgroup_products.choices_for(*shape, 3), SM_90).total_us
            rows.append((shape, times[name, shape], estimate))
            errors.append(abs(estimate / times[name, shape] - 1))
            print(f"{name:18s} {shape[0]:3d}x{shape[1]:<3d} measured {times[name, shape]:8.1f} us, "
                  f"estimated {estimate:8.1f} us")
        if rows:
            ranked, fastest = min(rows, key=lambda r: r[2]), min(rows, key=lambda r: r[1])
            print(f"  ranked first: {ranked[0][0]}x{ranked[0][1]} ({ranked[1]:.1f} us); fastest measured: "
                  f"{fastest[0][0]}x{fastest[0][1]} ({fastest[1]:.1f} us); the one ranked first takes "
                  f"{100 * (ranked[1] / fastest[1] - 1):.1f} % longer")
    print(f"mean error of the estimates: {100 * sum(errors) / len(errors):.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

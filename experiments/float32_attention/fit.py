"""The float32 attention schedule's cost constants against the times of ``time_attention.py``:
for each case and pinned setting, the estimate under each candidate pair (``TILE_NS_PER_WORK``,
``SATURATING_WARPS``) against the measured time; prints the ratio's spread and how often the
cheapest estimate is the fastest setting. ``python experiments/float32_attention/fit.py
attention.json`` on any machine (it compiles for sm_90 on the CPU)."""
import itertools
import json
import math
import re
import sys
import warnings

import torch

from lamina.backends.cuda.targets import SM90
from lamina.plugins.schedules.attention.float32 import tiling
from lamina.plugins.schedules.attention.float32.recognise import analyse

CASE = re.compile(r"(\S+) h(\d+)/(\d+) s(\d+) d(\d+)( causal)?")
SETTING = re.compile(r"(\d+)x(\d+), (\d+) stages")


def fused_kernel(heads, kv_heads, length, depth, causal, batch):
    import lamina
    import torch.nn.functional as F

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)

    args = (torch.randn(batch, heads, length, depth), *(torch.randn(batch, kv_heads, length, depth) for _ in range(2)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = lamina.compile(fn, args, target="sm_90", knobs={"attention_float32": {"block_queries": 64}})
    (tile,) = [t for t in compiled.compilation.tiles if t.schedule == tiling.SCHEDULE_NAME]
    return analyse(tile.kernel)


def main(path):
    measured = json.load(open(path))["cases"]
    target = SM90
    rows = []
    for case in measured:
        name, heads, kv_heads, length, depth, causal = CASE.match(case["case"]).groups()
        p = fused_kernel(int(heads), int(kv_heads), int(length), int(depth), bool(causal),
                         8 if ".b8" in name else 1)
        for key, value in case.items():
            found = SETTING.fullmatch(key)
            if found and isinstance(value, dict):
                choice = tiling.Float32AttentionChoice(*map(int, found.groups()))
                rows.append((case["case"], choice, value["us"], p))
    best = None
    for ns, warps in itertools.product([3e-3, 4e-3, 5e-3, 6.5e-3, 8e-3, 1e-2], [4, 8, 12, 16, 24, 32]):
        tiling.TILE_NS_PER_WORK, tiling.SATURATING_WARPS = ns, warps
        ratios = [math.log(tiling.estimate_us(p, c, target) / us) for _, c, us, p in rows]
        spread = math.sqrt(sum(r * r for r in ratios) / len(ratios))
        cases = {r[0] for r in rows}
        picks = 0
        for case in cases:
            mine = [r for r in rows if r[0] == case]
            cheapest = min(mine, key=lambda r: tiling.estimate_us(r[3], r[1], target))
            picks += cheapest[2] <= 1.05 * min(r[2] for r in mine)
        mean = math.exp(sum(ratios) / len(ratios))
        print(f"{ns:.1e} ns, {warps:2d} warps: rms log ratio {spread:.3f}, mean ratio {mean:.2f}, "
              f"cheapest within 5 % of fastest in {picks} of {len(cases)}")
        if best is None or spread < best[0]:
            best = (spread, ns, warps)
    print("best:", best)


if __name__ == "__main__":
    main(sys.argv[1])

"""TinyLlama's LM head at 512 tokens (512 x 2048 by 32000, bf16) as lamina chooses it and under
pinned Hopper GEMM settings, against eager and torch.compile (cuBLAS): the median of 15 CUDA-graph
replays of 20 calls. Run on a GPU: ``python experiments/lm_head_tiles/sweep.py`` (writes
``lm_head_sweep.json`` under ``$OUT``, or here)."""
import json
import os

import torch
import torch.nn.functional as F

import lamina


def timed(fn, *args, calls=20, replays=15):
    for _ in range(3): fn(*args)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        fn(*args)
        with torch.cuda.graph(g):
            for _ in range(calls): fn(*args)
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1000 / calls)
    return sorted(times)[len(times) // 2]


x = torch.randn(512, 2048, device="cuda", dtype=torch.bfloat16)
w = torch.randn(32000, 2048, device="cuda", dtype=torch.bfloat16) * 0.02
f = lambda x, w: F.linear(x, w)
results = {"torch.compile": timed(torch.compile(f), x, w), "eager": timed(f, x, w)}
settings = {
    "chosen": {},
    "128x256 s3": {"block_m": 128, "block_n": 256, "stages": 3},
    "256x128 s4": {"block_m": 256, "block_n": 128, "stages": 4},
    "256x128 s3": {"block_m": 256, "block_n": 128, "stages": 3},
    "128x256 s4 cluster2": {"block_m": 128, "block_n": 256, "stages": 4, "cluster_blocks": 2},
    "256x128 s4 cluster2": {"block_m": 256, "block_n": 128, "stages": 4, "cluster_blocks": 2},
    "128x256 persistent": {"block_m": 128, "block_n": 256, "tile_scheduler": "persistent"},
    "128x128 s5": {"block_m": 128, "block_n": 128, "stages": 5},
}
for name, knobs in settings.items():
    try:
        c = lamina.compile(f, (x, w), **({"knobs": {"contraction": knobs}} if knobs else {}))
        out = c(x, w)
        err = ((out.float() - f(x, w).float()).norm() / f(x, w).float().norm()).item()
        tile = [l for l in c.compilation.ir("tile").splitlines() if "chosen" in l or "grid" in l]
        results[name] = {"us": timed(c, x, w), "error": err, "tile": tile}
    except Exception as e:
        results[name] = {"failed": f"{type(e).__name__}: {str(e)[:300]}"}
    print(name, results[name], flush=True)
json.dump(results, open(os.path.join(os.environ.get("OUT", os.path.dirname(__file__)), "lm_head_sweep.json"), "w"), indent=1)

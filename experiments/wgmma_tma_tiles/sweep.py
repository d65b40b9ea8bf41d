"""Time every ``products = wgmma_tma`` setting on the bf16 linears of the kernel suite (H200).

    python experiments/wgmma_tma_tiles/sweep.py --out experiments/wgmma_tma_tiles/DATE_h200_sweep.json

For each linear (M, K, N) it compiles ``F.linear(x, w)`` with each setting pinned (block_m,
block_n, stages, consumer_warpgroups), times it by CUDA-graph replay as ``lamina bench`` does,
checks it against cuBLAS, and times the cost model's own pick and cuBLAS beside them, so that
the cost model's figures can be fitted to the measurements. Processes compile
at once and take turns on the GPU (a lock).
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing as mp
import sys
import time

SHAPES = {
    # name: (K, N) of the suite's bf16 linears
    "tinyllama.qkv": (2048, 2560), "tinyllama.o": (2048, 2048), "tinyllama.gate_up": (2048, 11264),
    "tinyllama.down": (5632, 2048), "qwen.qkv": (3584, 4608), "qwen.o": (3584, 3584),
    "qwen.gate_up": (3584, 37888), "qwen.down": (18944, 3584),
}
SETTINGS = [s for s in itertools.product((64, 128), (64, 128, 256), (2, 3, 4, 5), (1, 2))
            if not (s[3] == 2 and s[0] == 64) and not (s[3] == 1 and s[0] * s[1] > 128 * 128)]
"""(block_m, block_n, stages, consumer_warpgroups) that can hold their accumulators."""

_lock = None


def _init(lock):
    global _lock
    _lock = lock


def _one(job):
    name, m, k, n, choice = job
    import torch
    import torch.nn.functional as F

    import lamina
    from lamina.bench.measure import time_cuda_graph
    torch.manual_seed(0)
    x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda") / k ** 0.5
    record = {"case": name, "m": m, "k": k, "n": n, "setting": list(choice) if choice else "cost model"}
    try:
        started = time.perf_counter()
        knobs = None if choice is None else {"contraction": dict(zip(
            ("block_m", "block_n", "stages", "consumer_warpgroups"), choice), products="wgmma_tma")}
        compiled = lamina.compile(lambda x, w: F.linear(x, w), (x, w), knobs=knobs)
        record["compile_s"] = round(time.perf_counter() - started, 2)
        tile = next(t for t in compiled.compilation.tiles if t.settings is not None)
        record["chosen"] = {k: v for k, v in tile.knobs}
        with _lock:
            out = compiled(x, w)
            reference = F.linear(x, w)
            record["max_error"] = float((out.float() - reference.float()).abs().max())
            record["us"] = time_cuda_graph(compiled, (x, w), replays=30, warmup=5)
            if choice is None:
                record["cublas_us"] = time_cuda_graph(lambda x, w: F.linear(x, w), (x, w), replays=30, warmup=5)
        record["tflops"] = round(2 * m * n * k / record["us"] / 1e6, 1)
    except Exception as e:  # a setting that cannot run is a result too
        record["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    return record


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--rows", type=int, nargs="+", default=[128, 2048])
    parser.add_argument("--cases", nargs="+", default=list(SHAPES))
    parser.add_argument("--processes", type=int, default=14)
    args = parser.parse_args(argv)
    jobs = [(f"{c}.s{m}", m, *SHAPES[c], s) for m in args.rows for c in args.cases for s in [None, *SETTINGS]]
    ctx = mp.get_context("spawn")
    lock = ctx.Lock()
    records, started = [], time.perf_counter()
    with ctx.Pool(args.processes, initializer=_init, initargs=(lock,)) as pool:
        for i, r in enumerate(pool.imap_unordered(_one, jobs)):
            records.append(r)
            print(f"[{i + 1}/{len(jobs)}] {r['case']} {r['setting']}: {r.get('us', r.get('error'))}", flush=True)
    best = {}
    for r in records:
        if "us" in r and r["setting"] != "cost model":
            if r["case"] not in best or r["us"] < best[r["case"]]["us"]:
                best[r["case"]] = r
    summary = []
    for r in records:
        if r["setting"] == "cost model" and "us" in r:
            b = best.get(r["case"], {})
            summary.append({"case": r["case"], "cost_model_us": r["us"], "cost_model_pick": r.get("chosen"),
                            "best_us": b.get("us"), "best_setting": b.get("setting"), "cublas_us": r.get("cublas_us")})
    for s in sorted(summary, key=lambda s: s["case"]):
        print(f"{s['case']:24s} cost model {s['cost_model_us']:8.1f}  best {s['best_us'] or 0:8.1f} {s['best_setting']}"
              f"  cuBLAS {s['cublas_us']:8.1f}")
    with open(args.out, "w") as f:
        json.dump({"command": "python " + " ".join(sys.argv), "seconds": round(time.perf_counter() - started),
                   "summary": summary, "records": records}, f, indent=1)


if __name__ == "__main__":
    main()

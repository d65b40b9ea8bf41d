"""GPU time of TinyLlama's products at 512 rows (bf16) under the cost model's setting and pinned
ones, against torch.compile (cuBLAS). Run on a GPU: ``python experiments/llama_products/pinned.py``
(writes ``pinned.json`` under ``$OUT``, or here)."""
import json
import os
import time

import torch

import lamina
from lamina.bench.measure import profiled_us


def pins(block_m, block_n, stages, groups, split=1):
    return {"products": "wgmma_tma", "block_m": block_m, "block_n": block_n, "stages": stages,
            "consumer_warpgroups": groups, "split_k": split}


def linear(x, w):
    return x @ w.t()


def linear_residual(x, w, r):
    return r + x @ w.t()


def gated(x, wg, wu):
    return torch.nn.functional.silu(x @ wg.t()) * (x @ wu.t())


torch.manual_seed(0)
ROWS, HIDDEN, INTER, VOCAB = 512, 2048, 5632, 32000


def weight(n, k):
    return (torch.randn(n, k, device="cuda") * 0.02).to(torch.bfloat16)


x = torch.randn(ROWS, HIDDEN, device="cuda", dtype=torch.bfloat16)
h = torch.randn(ROWS, INTER, device="cuda", dtype=torch.bfloat16)
CASES = {
    "o 512x2048x2048": (linear, (x, weight(HIDDEN, HIDDEN))),
    "o_residual 512x2048x2048": (linear_residual, (x, weight(HIDDEN, HIDDEN), x.clone())),
    "down_residual 512x5632x2048": (linear_residual, (h, weight(HIDDEN, INTER), x.clone())),
    "gate_up_silu 512x2048x5632 twice": (gated, (x, weight(INTER, HIDDEN), weight(INTER, HIDDEN))),
    "lm_head 512x2048x32000": (linear, (x, weight(VOCAB, HIDDEN))),
}
SETTINGS = [None, pins(128, 64, 4, 1), pins(128, 96, 4, 2), pins(128, 128, 4, 1), pins(128, 128, 4, 2),
            pins(128, 192, 4, 2), pins(128, 256, 4, 2), pins(64, 128, 4, 1), pins(64, 192, 4, 1),
            pins(128, 128, 4, 2, 2), pins(128, 64, 4, 1, 2)]
results = {}
for case, (fn, args) in CASES.items():
    results[f"{case} torch.compile"] = profiled_us(torch.compile(fn), args)
    print(case, "torch.compile", results[f"{case} torch.compile"], flush=True)
    for setting in SETTINGS:
        key = f"{case} " + ("cost model" if setting is None else
                            "_".join(f"{k}={v}" for k, v in setting.items() if k != "products"))
        start = time.time()
        try:
            compiled = lamina.compile(fn, args, knobs={"contraction": setting} if setting else {})
            results[key] = profiled_us(compiled, args)
            results[f"{key} tiles"] = [
                f"{t.kernel.name}: {t.schedule} " + "; ".join(f"{k}={v}" for k, v in t.knobs if k == "chosen")
                + (f"; early reads {t.settings.early_read_registers}" if getattr(t.settings, "early_read_registers", 0)
                   else "")
                for t in compiled.compilation.tiles]
        except Exception as e:  # a pinned setting the schedule refuses: its reason is the result
            results[key] = repr(e)[:300]
        print(key, results[key], f"({time.time() - start:.0f} s)", flush=True)
out = os.path.join(os.environ.get("OUT", os.path.dirname(__file__)), "pinned.json")
with open(out, "w") as f:
    json.dump(results, f, indent=1)

"""Products of few output tiles with their reduction in slices summed in a cluster (``cluster_slices``)
against the cost model's choice (split-K in two kernels, or none) and torch.compile (cuBLAS):
``python experiments/gemm_cluster_slices/time_slices.py`` on a GPU; writes ``slices.json`` under
``$OUT`` (or here). Each figure is the median CUDA-graph replay of 20 calls to a graph, per call."""
import json
import os

import torch
import torch.nn.functional as F

import lamina
from lamina.bench.measure import relative_error, time_cuda_graph


def sliced(block_m, block_n, groups, slices, stages=4):
    return {"products": "wgmma_tma", "block_m": block_m, "block_n": block_n, "consumer_warpgroups": groups,
            "stages": stages, "cluster_slices": slices, "split_k": 1}


def linear(x, w):
    return x @ w.t()


def linear_bias(x, w, b):
    return F.linear(x, w, b)


def linear_residual(x, w, r):
    return r + x @ w.t()


torch.manual_seed(0)


def tensor(*shape, scale=1.0):
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16) * scale


ROWS_128 = [sliced(128, 128, 2, 2), sliced(128, 128, 2, 4), sliced(64, 128, 1, 2), sliced(64, 128, 1, 4),
            sliced(128, 64, 2, 2)]
CASES = {
    "tinyllama qkv 128x2048x2560": (linear, (tensor(128, 2048), tensor(2560, 2048, scale=0.02)), ROWS_128),
    "tinyllama o 128x2048x2048": (linear, (tensor(128, 2048), tensor(2048, 2048, scale=0.02)), ROWS_128),
    "tinyllama down 128x5632x2048": (linear, (tensor(128, 5632), tensor(2048, 5632, scale=0.02)), ROWS_128),
    "qwen qkv+bias 128x3584x4608": (linear_bias, (tensor(128, 3584), tensor(4608, 3584, scale=0.02), tensor(4608)),
                                    ROWS_128),
    "qwen o 128x3584x3584": (linear, (tensor(128, 3584), tensor(3584, 3584, scale=0.02)), ROWS_128),
    "qwen down 128x18944x3584": (linear, (tensor(128, 18944), tensor(3584, 18944, scale=0.02)), ROWS_128),
    "tinyllama q 512x2048x2048": (linear, (tensor(512, 2048), tensor(2048, 2048, scale=0.02)),
                                  [sliced(128, 128, 2, 2), sliced(128, 64, 2, 2)]),
    "tinyllama down+residual 512x5632x2048": (linear_residual, (tensor(512, 5632), tensor(2048, 5632, scale=0.02),
                                                                tensor(512, 2048)),
                                              [sliced(128, 128, 2, 2), sliced(128, 64, 2, 2)]),
    "qwen q 512x3584x3584": (linear, (tensor(512, 3584), tensor(3584, 3584, scale=0.02)),
                             [sliced(128, 128, 2, 2), sliced(128, 64, 2, 2)]),
}
out = {}
for case, (fn, args, settings) in CASES.items():
    reference = fn(*(a.double() for a in args))
    out[f"{case} | torch.compile"] = round(time_cuda_graph(torch.compile(fn), args, calls_per_graph=20), 2)
    print(case, "torch.compile", out[f"{case} | torch.compile"], flush=True)
    for pins in [None, *settings]:
        name = "cost model" if pins is None else (f"{pins['block_m']}x{pins['block_n']}, {pins['consumer_warpgroups']} "
                                                  f"warpgroups, {pins['cluster_slices']} slices")
        try:
            compiled = lamina.compile(fn, args, knobs={"contraction": pins} if pins else {})
            out[f"{case} | {name}"] = {
                "us": round(time_cuda_graph(compiled, args, calls_per_graph=20), 2),
                "error": relative_error(compiled(*args), reference),
                "chosen": [dict(t.knobs).get("chosen", t.schedule).split(";")[0] for t in compiled.compilation.tiles]}
        except Exception as e:  # a setting the schedule refuses: its reason is the result
            out[f"{case} | {name}"] = repr(e)[:300]
        print(case, name, out[f"{case} | {name}"], flush=True)
with open(os.path.join(os.environ.get("OUT", os.path.dirname(__file__)), "slices.json"), "w") as f:
    json.dump(out, f, indent=1)

"""The suite's 16-bit projections at 512 and 2 048 rows (TinyLlama's and Qwen2.5-7B's, their LM
heads among them) as the cost model chooses them and with the ring's stages pinned to 3, the cost
model choosing the rest, against eager (cuBLAS, which torch.compile calls for them): which setting
puts the outputs through the TMA's shared tile, and how fast each is (``time_cuda_graph``: the median of 15
CUDA-graph replays of 20 calls). Run on a GPU:
``python experiments/lm_head_tiles/stages_sweep.py`` (writes ``stages_sweep.json`` under ``$OUT``,
or here, after each product)."""
import json
import os

import torch
import torch.nn.functional as F

import lamina
from lamina.bench.measure import time_cuda_graph

PRODUCTS = {  # name: (K, N, bias), the LM heads first
    "tinyllama.lm_head": (2048, 32000, False), "qwen.lm_head": (3584, 152064, False),
    "tinyllama.qkv": (2048, 2560, False), "tinyllama.o": (2048, 2048, False),
    "tinyllama.gate_up": (2048, 11264, False), "tinyllama.down": (5632, 2048, False),
    "qwen.qkv": (3584, 4608, True), "qwen.o": (3584, 3584, False), "qwen.gate_up": (3584, 37888, False),
    "qwen.down": (18944, 3584, False),
}
SETTINGS = {"chosen": {}, "3 stages": {"stages": 3}}


def main() -> None:
    path = os.path.join(os.environ.get("OUT", os.path.dirname(__file__)), "stages_sweep.json")
    results = {}
    for name, (k, n, bias) in PRODUCTS.items():
        for rows in (512, 2048):
            x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
            args = (x, w) + ((torch.randn(n, device="cuda", dtype=torch.bfloat16),) if bias else ())
            fn = (lambda x, w, b: F.linear(x, w, b)) if bias else (lambda x, w: F.linear(x, w))
            case = {"eager": time_cuda_graph(fn, args, replays=15, calls_per_graph=20)}
            for setting, knobs in SETTINGS.items():
                try:
                    compiled = lamina.compile(fn, args, **({"knobs": {"contraction": knobs}} if knobs else {}))
                    tile = compiled.compilation.ir("tile").splitlines()
                    case[setting] = {"us": time_cuda_graph(compiled, args, replays=15, calls_per_graph=20),
                                     "chosen": [line.strip() for line in tile if "chosen =" in line],
                                     "tma_stores": any("outputs stored by the TMA" in line for line in tile),
                                     "estimate": [line.strip() for line in tile if "estimate =" in line]}
                except Exception as error:  # noqa: BLE001 - a setting that cannot run is a row of the table
                    case[setting] = {"failed": f"{type(error).__name__}: {str(error)[:200]}"}
            results[f"{name}.s{rows}"] = case
            print(f"{name}.s{rows}", {s: v if isinstance(v, float) else v.get("us", v.get("failed")) for s, v in case.items()},
                  flush=True)
            with open(path, "w") as f:
                json.dump(results, f, indent=1)
            del x, w, args
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

"""The Hopper GEMM with deeper rings of k-tiles against the cost model's choice (rings of 2 to 5) and
torch.compile (cuBLAS), on the products where lamina trailed cuBLAS most: the 128-row projections,
whose time is the weights' trip from memory, and a few at 512 rows and an LM head.
``python experiments/deep_rings/time_rings.py [--quick] [--cost-model-only] [--name=NAME]`` on a GPU;
writes ``NAME.json`` (``rings.json``) under ``$OUT`` (or here). Each figure is the median CUDA-graph
replay of 20 calls to a graph, per call."""
import json
import os
import sys

import torch
import torch.nn.functional as F


def ring(block_m, block_n, stages, **more):
    return {"products": "wgmma_tma", "block_m": block_m, "block_n": block_n,
            "consumer_warpgroups": 2 if block_m == 128 else 1, "stages": stages, "split_k": 1, **more}


def linear(x, w):
    return x @ w.t()


def linear_bias(x, w, b):
    return F.linear(x, w, b)


def linear_residual(x, w, r):
    return r + x @ w.t()


def gated(x, g, u):
    return F.silu(x @ g.t()) * (x @ u.t())


SETTINGS = [None, {"stages": 8}, ring(64, 64, 12), ring(64, 80, 10), ring(64, 128, 8), ring(128, 64, 8),
            ring(128, 128, 6), ring(64, 64, 12, cluster_slices=2)]
"""The cost model's choice, the cost model's with 8 stages pinned, and settings of one kernel each."""


def setting_name(pins: dict | None) -> str:
    return "cost model" if pins is None else ", ".join(f"{k} {v}" for k, v in pins.items() if k != "products")


def cases(device: str) -> dict:
    """Each product's function and its bf16 arguments, random, the weights scaled as a layer's."""
    torch.manual_seed(0)

    def tensor(*shape, scale=1.0):
        return torch.randn(*shape, device=device, dtype=torch.bfloat16) * scale

    def weight(n, k):
        return tensor(n, k, scale=k ** -0.5)

    return {
        "tinyllama qkv 128x2048x2560": (linear, (tensor(128, 2048), weight(2560, 2048))),
        "tinyllama o 128x2048x2048": (linear, (tensor(128, 2048), weight(2048, 2048))),
        "tinyllama gate/up 128x2048x5632x2": (gated, (tensor(128, 2048), weight(5632, 2048), weight(5632, 2048))),
        "tinyllama down 128x5632x2048": (linear, (tensor(128, 5632), weight(2048, 5632))),
        "qwen qkv+bias 128x3584x4608": (linear_bias, (tensor(128, 3584), weight(4608, 3584), tensor(4608))),
        "qwen o 128x3584x3584": (linear, (tensor(128, 3584), weight(3584, 3584))),
        "qwen down 128x18944x3584": (linear, (tensor(128, 18944), weight(3584, 18944))),
        "tinyllama q 512x2048x2048": (linear, (tensor(512, 2048), weight(2048, 2048))),
        "tinyllama down+residual 512x5632x2048": (linear_residual, (tensor(512, 5632), weight(2048, 5632),
                                                                    tensor(512, 2048))),
        "qwen q 512x3584x3584": (linear, (tensor(512, 3584), weight(3584, 3584))),
        "bert up 512x768x3072": (linear_bias, (tensor(512, 768), weight(3072, 768), tensor(3072))),
        "tinyllama lm head 512x2048x32000": (linear, (tensor(512, 2048), weight(32000, 2048))),
    }


def time_settings(products: dict, settings: list, setting_name) -> dict:
    """Each product's torch.compile time, and each setting's time, error against float64 and
    choices, keyed ``"PRODUCT | SETTING"``; a setting the schedule refuses records its reason."""
    import lamina
    from lamina.bench.measure import relative_error, time_cuda_graph

    out = {"gpu": torch.cuda.get_device_name()}
    for case, (fn, args) in products.items():
        reference = fn(*(a.double() for a in args))
        out[f"{case} | torch.compile"] = round(time_cuda_graph(torch.compile(fn), args, calls_per_graph=20), 2)
        print(case, "torch.compile", out[f"{case} | torch.compile"], flush=True)
        for pins in settings:
            name = setting_name(pins)
            try:
                compiled = lamina.compile(fn, args, knobs={"contraction": pins} if pins else {})
                out[f"{case} | {name}"] = {
                    "us": round(time_cuda_graph(compiled, args, calls_per_graph=20), 2),
                    "error": relative_error(compiled(*args), reference),
                    "chosen": [dict(t.knobs).get("chosen", t.schedule).split(";")[0]
                               for t in compiled.compilation.tiles]}
            except Exception as e:  # a setting the schedule refuses: its reason is the result
                out[f"{case} | {name}"] = repr(e)[:300]
            print(case, name, out[f"{case} | {name}"], flush=True)
    return out


def main():
    products = cases("cuda")
    settings = [None] if "--cost-model-only" in sys.argv else SETTINGS
    if "--quick" in sys.argv:
        products = dict(list(products.items())[:1])
    out = time_settings(products, settings, setting_name)
    name = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--name=")), "rings")
    with open(os.path.join(os.environ.get("OUT", os.path.dirname(__file__)), f"{name}.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()

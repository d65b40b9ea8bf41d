"""OPT-125m's LM head over 8 x 128 tokens (1 024 x 768 -> 50 272, bf16) under the cost model's
choice and pinned Hopper GEMM settings, on the grid and persistent, against torch.compile (cuBLAS).
``python experiments/small_models_at_batch_8/time_lm_head.py`` on a GPU; writes ``lm_head.json``
under ``$OUT`` (or here). Median CUDA-graph replay of 5 calls to a graph."""
import json
import os

import torch
import torch.nn.functional as F


def setting(block_m, block_n, stages, **more):
    return {"products": "wgmma_tma", "block_m": block_m, "block_n": block_n, "consumer_warpgroups": 2,
            "stages": stages, "split_k": 1} | more


PERSISTENT = {"tile_scheduler": "persistent"}
SETTINGS = [None, setting(128, 256, 4, **PERSISTENT), setting(128, 256, 3), setting(128, 256, 3, **PERSISTENT),
            setting(128, 128, 4), setting(128, 128, 3), setting(128, 128, 4, **PERSISTENT),
            setting(128, 128, 6, **PERSISTENT), setting(128, 192, 4), setting(128, 192, 4, **PERSISTENT),
            setting(128, 256, 2)]


def head(x, w):
    return F.linear(x, w)


def main():
    import lamina
    from lamina.bench.measure import relative_error, time_cuda_graph

    torch.manual_seed(0)
    args = (torch.randn(8, 128, 768, device="cuda", dtype=torch.bfloat16),
            torch.randn(50272, 768, device="cuda", dtype=torch.bfloat16) / 768 ** 0.5)
    reference = head(*(a.double() for a in args))
    out = {"gpu": torch.cuda.get_device_name(),
           "torch.compile": round(time_cuda_graph(torch.compile(head), args, calls_per_graph=5), 2)}
    for pins in SETTINGS:
        name = "cost model" if pins is None else ", ".join(f"{k} {v}" for k, v in pins.items() if k != "products")
        try:
            compiled = lamina.compile(head, args, knobs={"contraction": pins} if pins else {})
            out[name] = {"us": round(time_cuda_graph(compiled, args, calls_per_graph=5), 2),
                         "error": relative_error(compiled(*args), reference),
                         "chosen": [dict(t.knobs).get("chosen", t.schedule).split(";")[0]
                                    for t in compiled.compilation.tiles],
                         "estimate": [dict(t.knobs).get("estimate", "")[:60] for t in compiled.compilation.tiles]}
        except Exception as e:  # a setting the schedule refuses: its reason is the result
            out[name] = repr(e)[:300]
        print(name, out[name], flush=True)
    with open(os.path.join(os.environ.get("OUT", os.path.dirname(__file__)), "lm_head.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()

"""Float32 attention in one kernel (``attention_float32``) against the kernels it replaces and
eager SDPA, for the attention shapes of the model suite: every setting of the schedule (pinned,
as the fusion rule needs) and the program unpinned (the decomposed kernels), with their
estimates, so that the schedule's constants can be fitted and the rule can weigh them. ``python
experiments/float32_attention/time_attention.py`` on a GPU; writes ``attention.json`` under
``$OUT`` (or here). Median CUDA-graph replay of 10 calls to a graph."""
import itertools
import json
import os

import torch
import torch.nn.functional as F

CASES = [  # name, heads, key-value heads, length, features, causal
    ("bert", 12, 12, 512, 64, False),
    ("tinyllama", 32, 4, 512, 64, True),
    ("tinyllama", 32, 4, 2048, 64, True),
    ("qwen", 28, 4, 2048, 128, True),
]
SETTINGS = [{"block_queries": q, "keys_per_tile": k, "stages": s}
            for q, k, s in itertools.product((64, 128), (32, 64), (2, 3))]


def case_fn(causal):
    def attention(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    return attention


def main():
    import lamina
    from lamina.bench.measure import relative_error, time_cuda_graph

    out = {"gpu": torch.cuda.get_device_name(), "cases": []}
    for name, heads, kv_heads, length, depth, causal in CASES:
        torch.manual_seed(0)
        batch = 8 if ".b8" in name else 1
        q = torch.randn(batch, heads, length, depth, device="cuda")
        k, v = (torch.randn(batch, kv_heads, length, depth, device="cuda") for _ in range(2))
        fn, args = case_fn(causal), (q, k, v)
        reference = fn(*(a.double() for a in args))
        row = {"case": f"{name} h{heads}/{kv_heads} s{length} d{depth}{' causal' if causal else ''}",
               "eager_us": round(time_cuda_graph(fn, args, calls_per_graph=10, replays=30), 2),
               "eager_error": relative_error(fn(*args), reference)}

        def timed(compiled):
            return {"us": round(time_cuda_graph(compiled, args, calls_per_graph=10, replays=30), 2),
                    "error": relative_error(compiled(*args), reference),
                    "kernels": [(t.schedule, dict(t.knobs).get("estimate", "")) for t in compiled.compilation.tiles]}

        row["unpinned"] = timed(lamina.compile(fn, args))
        for pins in SETTINGS:
            key = "{block_queries}x{keys_per_tile}, {stages} stages".format(**pins)
            try:
                row[key] = timed(lamina.compile(fn, args, knobs={"attention_float32": pins}))
            except Exception as e:  # a setting the schedule refuses: its reason is the result
                row[key] = repr(e)[:200]
        print(json.dumps(row), flush=True)
        out["cases"].append(row)
        with open(os.path.join(os.environ.get("OUT", os.path.dirname(__file__)), "attention.json"), "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()

"""BERT-base's attention at batch 8 x 128 tokens (12 heads of 64 features), with a padding mask
(one sequence padded from position 100) and without, under the cost model's choice and pinned
``attention`` settings, against eager SDPA (cuDNN's or FlashAttention's kernel without the mask).
``python experiments/small_models_at_batch_8/time_attention.py`` on a GPU; writes
``attention.json`` under ``$OUT`` (or here). Median CUDA-graph replay of 20 calls to a graph."""
import json
import os

import torch
import torch.nn.functional as F

SETTINGS = [None] + [{"block_queries": q, "block_keys": k, "stages": s, "warpgroups": w} for q, k, s, w in [
    (64, 128, 2, "in_step"), (64, 64, 2, "in_step"), (64, 128, 3, "in_step"), (128, 128, 2, "ping_pong"),
    (128, 64, 3, "ping_pong"), (128, 128, 3, "in_step"), (128, 64, 2, "in_step")]]


def masked(q, k, v, m):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m)


def plain(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def main():
    import lamina
    from lamina.bench.measure import relative_error, time_cuda_graph

    torch.manual_seed(0)
    q, k, v = (torch.randn(8, 12, 128, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    mask = torch.ones(8, 1, 1, 128, device="cuda", dtype=torch.bool)
    mask[1, ..., 100:] = False
    out = {"gpu": torch.cuda.get_device_name()}
    for name, fn, args in (("masked", masked, (q, k, v, mask)), ("plain", plain, (q, k, v))):
        reference = fn(*(a.double() if a.is_floating_point() else a for a in args))
        out[f"{name} | eager"] = round(time_cuda_graph(fn, args, calls_per_graph=20), 2)
        for pins in SETTINGS:
            setting = "cost model" if pins is None else ", ".join(f"{a} {b}" for a, b in pins.items())
            try:
                compiled = lamina.compile(fn, args, knobs={"attention": pins} if pins else {})
                out[f"{name} | {setting}"] = {
                    "us": round(time_cuda_graph(compiled, args, calls_per_graph=20), 2),
                    "error": relative_error(compiled(*args), reference),
                    "chosen": [dict(t.knobs).get("chosen", t.schedule)[:60] for t in compiled.compilation.tiles],
                    "estimate": [dict(t.knobs).get("estimate", "") for t in compiled.compilation.tiles]}
            except Exception as e:  # a setting the schedule refuses: its reason is the result
                out[f"{name} | {setting}"] = repr(e)[:200]
            print(name, setting, out[f"{name} | {setting}"], flush=True)
    with open(os.path.join(os.environ.get("OUT", os.path.dirname(__file__)), "attention.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()

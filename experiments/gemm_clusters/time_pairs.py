"""Time 16-bit products in pairs of blocks sharing B (clusters), persistent or not, against blocks alone and
torch.compile: `python experiments/gemm_clusters/time_pairs.py` on a GPU (writes clusters.json under $OUT)."""
import json, os, torch, lamina
from lamina.bench.measure import profiled_us, relative_error
torch.manual_seed(0)
def w(n, k): return torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
def a(m, k): return torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
lin = lambda x, w: x @ w.t()
res = lambda x, w, r: r + x @ w.t()
gated = lambda x, g, u: torch.nn.functional.silu(x @ g.t()) * (x @ u.t())
x, h = a(512, 2048), a(512, 5632)
CASES = {
    "tinyllama q 512x2048x2048": (lin, (x, w(2048, 2048))),
    "tinyllama o+residual 512x2048x2048": (res, (x, w(2048, 2048), x.clone())),
    "tinyllama down+residual 512x5632x2048": (res, (h, w(2048, 5632), x.clone())),
    "tinyllama gate_up 512x2048x5632x2": (gated, (x, w(5632, 2048), w(5632, 2048))),
    "tinyllama lm_head 512x2048x32000": (lin, (x, w(32000, 2048))),
    "qwen q 512x3584x3584": (lin, (a(512, 3584), w(3584, 3584))),
}
PINS = {"cost model": {}, "clusters": {"cluster_blocks": 2},
        "persistent clusters": {"cluster_blocks": 2, "tile_scheduler": "persistent"}}
out = {}
for case, (fn, args) in CASES.items():
    ref = fn(*(t.double() for t in args))
    out[case + " | torch.compile"] = round(profiled_us(torch.compile(fn), args), 2)
    print(case, out[case + " | torch.compile"], flush=True)
    for name, pins in PINS.items():
        try:
            c = lamina.compile(fn, args, knobs={"contraction": pins})
            err = relative_error(c(*args), ref)
            out[f"{case} | {name}"] = {"us": round(profiled_us(c, args), 2), "error": err,
                                       "chosen": [dict(t.knobs).get("chosen", t.schedule).split(";")[0] for t in c.compilation.tiles]}
        except Exception as e:
            out[f"{case} | {name}"] = repr(e)[:300]
        print(case, name, out[f"{case} | {name}"], flush=True)
json.dump(out, open(os.path.join(os.environ["OUT"], "clusters.json"), "w"), indent=1)

"""GPU time of lamina's products under pinned settings: GPT-2's LM head (512 x 768 by 50 257 words,
and by 50 304 for an even row length) and its first MLP product (a Conv1D weight, 768 x 3 072),
against torch.compile (cuBLAS). Run on a GPU: ``python experiments/odd_row_stores/pinned_products.py``
(writes ``pinned_products.json`` under ``$OUT`` or here)."""
import collections, json, os, torch, lamina

def kernel_us(fn, args, reps=20):
    for _ in range(3): fn(*args)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as p:
        for _ in range(reps): fn(*args)
        torch.cuda.synchronize()
    us = collections.defaultdict(float)
    for e in p.events():
        if e.device_type == torch.autograd.DeviceType.CUDA: us[e.name] += e.device_time_total / reps
    return round(sum(us.values()), 1)

torch.manual_seed(0)
x = torch.randn(512, 768, device="cuda", dtype=torch.bfloat16)
results = {}
def P(bm, bn, st, g, sched="grid"):
    return {"products": "wgmma_tma", "block_m": bm, "block_n": bn, "stages": st, "consumer_warpgroups": g, "tile_scheduler": sched}
for vocab in (50257, 50304):
    w = (torch.randn(vocab, 768, device="cuda") * 0.02).to(torch.bfloat16)
    fn = lambda x, w: x @ w.t()
    results[f"lm_head_{vocab}_torch"] = kernel_us(torch.compile(fn), (x, w))
    for pins in [None, P(128, 256, 4, 2), P(128, 256, 4, 2, "persistent"), P(128, 256, 2, 2), P(128, 128, 2, 1), P(128, 128, 2, 2), P(64, 256, 2, 1), P(128, 128, 4, 1, "persistent"), P(64, 128, 3, 1)]:
        try:
            c = lamina.compile(fn, (x, w), knobs={"contraction": pins} if pins else {})
            key = f"lm_head_{vocab}_" + ("model" if pins is None else "_".join(str(v) for k, v in pins.items() if k != "products"))
            results[key] = kernel_us(c, (x, w))
        except Exception as e:
            results[str(pins)] = repr(e)[:200]
        print(list(results.items())[-1], flush=True)
w = (torch.randn(768, 3072, device="cuda") * 0.02).to(torch.bfloat16)
b = (torch.randn(3072, device="cuda") * 0.02).to(torch.bfloat16)
fn = lambda x, w, b: torch.addmm(b, x, w)
results["conv1d_torch"] = kernel_us(torch.compile(fn), (x, w, b))
for pins in [None, P(64, 192, 4, 1), P(128, 128, 4, 1), P(128, 128, 2, 1), P(64, 128, 3, 1), P(128, 192, 4, 2), P(64, 64, 4, 1), P(128, 64, 3, 1)]:
    try:
        c = lamina.compile(fn, (x, w, b), knobs={"contraction": pins} if pins else {})
        key = "conv1d_" + ("model" if pins is None else "_".join(str(v) for k, v in pins.items() if k != "products"))
        results[key] = kernel_us(c, (x, w, b))
    except Exception as e:
        results[str(pins)] = repr(e)[:200]
    print(list(results.items())[-1], flush=True)
json.dump(results, open(os.path.join(os.environ.get("OUT", os.path.dirname(__file__)), "pinned_products.json"), "w"), indent=1)

"""Time the decode schedule at each range length against eager SDPA (CUDA-graph replay): python sweep.py OUT_DIR."""
import json, os, sys, torch, torch.nn.functional as F, lamina

def attention(q, k, v): return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

def graph_us(fn, args, replays=100):
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3): fn(*args)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(10): fn(*args)
    times = []
    for _ in range(replays // 10):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1000 / 10)
    times.sort(); return times[len(times) // 2]

rows = []
for name, h, kvh, d in [("tinyllama", 32, 4, 64), ("qwen", 28, 4, 128)]:
    for cache in (512, 4096, 32768):
        q = torch.randn(1, h, 1, d, dtype=torch.bfloat16, device="cuda")
        k = torch.randn(1, kvh, cache, d, dtype=torch.bfloat16, device="cuda")
        v = torch.randn_like(k)
        bytes_ = 2 * k.numel() * 2
        eager = graph_us(attention, (q, k, v))
        row = {"case": f"{name}.c{cache}", "eager_us": eager, "cache_bytes": bytes_}
        for kpb in (None, (256, 64, 2), (256, 64, 4), (1024, 64, 4), (512, 128, 2), (512, 128, 3), (1024, 128, 3), (2048, 128, 3)):
            if kpb and kpb[0] > cache: continue
            knobs = {"attention_decode": dict(zip(("keys_per_block", "keys_per_tile", "stages"), kpb))} if kpb else {}
            c = lamina.compile(attention, (q, k, v), knobs=knobs)
            t = graph_us(c, (q, k, v))
            row[f"lamina_{'_'.join(map(str, kpb)) if kpb else 'chosen'}_us"] = t
            if kpb is None:
                row["chosen"] = [kk for kk, vv in c.compilation.tiles[0].knobs if kk == "chosen"] and dict(c.compilation.tiles[0].knobs)["chosen"]
                err = (c(q, k, v).float() - attention(q, k, v).float()).abs().max().item()
                row["max_abs_diff"] = err
        row["hbm_share_chosen"] = bytes_ / (row["lamina_chosen_us"] * 1e-6) / 4.27e12
        rows.append(row); print(json.dumps(row), flush=True)
json.dump(rows, open(os.path.join(sys.argv[1], "sweep.json"), "w"), indent=1)

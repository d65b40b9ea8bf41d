"""One bf16 linear ``F.linear(x, w)`` of M x K x N through lamina on the GPU: its schedules, compile time and error.

    python experiments/hopper_gemm_in_models/one_linear.py M K N
"""
import sys, time, torch, torch.nn.functional as F
import lamina
m, k, n = (int(v) for v in sys.argv[1:4])
torch.manual_seed(0)
x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
t0 = time.time()
c = lamina.compile(lambda x, w: F.linear(x, w), (x, w))
t1 = time.time()
for t in c.compilation.tiles:
    kn = dict(t.knobs)
    print(" ", t.schedule, getattr(t.settings, "products", None), kn.get("chosen"), flush=True)
y = c(x, w); torch.cuda.synchronize()
ref = F.linear(x.float(), w.float())
err = ((y.float() - ref).norm() / ref.norm()).item()
print(f"{m}x{k}x{n}: compile {t1-t0:.1f}s err {err:.2e}", flush=True)

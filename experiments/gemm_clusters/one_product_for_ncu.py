"""One product, lamina's or cuBLAS's, profiled alone: `ncu --profile-from-start off --section SpeedOfLight --section
WarpStateStats python experiments/gemm_clusters/one_product_for_ncu.py q512|qkv128|lmhead512 lamina|cublas [knob=value ...]`
(the knobs pin the contraction schedule)."""
import sys, torch, lamina
case, who, pins = sys.argv[1], sys.argv[2], dict(a.split("=") for a in sys.argv[3:])
pins = {k: (int(v) if v.isdigit() else v) for k, v in pins.items()}
torch.manual_seed(0)
def w(n, k): return torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
CASES = {
    "q512": (lambda x, w: x @ w.t(), lambda: (torch.randn(512, 2048, device="cuda", dtype=torch.bfloat16), w(2048, 2048))),
    "qkv128": (lambda x, w, b: torch.nn.functional.linear(x, w, b),
               lambda: (torch.randn(128, 3584, device="cuda", dtype=torch.bfloat16), w(4608, 3584),
                        torch.randn(4608, device="cuda", dtype=torch.bfloat16))),
    "lmhead512": (lambda x, w: x @ w.t(), lambda: (torch.randn(512, 2048, device="cuda", dtype=torch.bfloat16), w(32000, 2048))),
}
fn, make = CASES[case]
args = make()
if who == "lamina":
    compiled = lamina.compile(fn, args, knobs={"contraction": pins} if pins else {})
    print([dict(t.knobs).get("chosen", t.schedule) for t in compiled.compilation.tiles], flush=True)
else:
    compiled = fn
for _ in range(3):
    compiled(*args)
torch.cuda.synchronize()
torch.cuda.profiler.start()
compiled(*args)
torch.cuda.synchronize()
torch.cuda.profiler.stop()

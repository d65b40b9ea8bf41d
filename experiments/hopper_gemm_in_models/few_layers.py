"""A real-size model cut to a few layers, bf16, through ``torch.compile(backend="lamina")`` on the GPU,
called as its users call it: first call, three more, and the error against eager bf16.

    python experiments/hopper_gemm_in_models/few_layers.py ARCH LENGTH LAYERS [SECONDS_BEFORE_A_TRACEBACK]
"""
import faulthandler, sys, time, torch
from lamina.models.architectures import architecture, build, example_inputs, main_output
name, length, layers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
faulthandler.dump_traceback_later(int(sys.argv[4]) if len(sys.argv) > 4 else 100, exit=True)
arch = architecture(name)
model = build(arch, size="real", length=length, layers=layers, dtype=torch.bfloat16, device="cuda")
inputs = example_inputs(arch, model, batch=1, length=length, device="cuda")
with torch.no_grad():
    ref = main_output(model(**inputs)).float()
    t0 = time.time()
    c = torch.compile(model, backend="lamina")
    out = main_output(c(**inputs)); torch.cuda.synchronize()
    t1 = time.time()
    print(f"{name} s{length} {layers} layers: first call {t1-t0:.1f}s", flush=True)
    for _ in range(3):
        out = main_output(c(**inputs))
    torch.cuda.synchronize(); t2 = time.time()
    print(f"  3 calls {1e3*(t2-t1)/3:.2f} ms each; err vs eager bf16 {((out.float()-ref).norm()/ref.norm()).item():.2e}", flush=True)

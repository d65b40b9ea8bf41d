"""Per-kernel GPU time of one layer of three architectures through torch.compile, lamina's backend and Inductor.

    python experiments/model_profiles/profile_arch.py phi3:8:512:1:bfloat16 qwen3:1:2048:1:bfloat16 llama:1:512:1:bfloat16

Each spec is ARCH:BATCH:LENGTH:LAYERS:DTYPE, real size; writes profile.json into $OUT (else the current directory).
"""
import collections, json, sys, time, torch
import lamina
from lamina.models.architectures import architecture, build, example_inputs
from torch.profiler import profile, ProfilerActivity

def kernels(fn, inputs, passes=3):
    with torch.no_grad():
        fn(**inputs); fn(**inputs); torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(passes):
                fn(**inputs)
            torch.cuda.synchronize()
    totals = collections.Counter(); counts = collections.Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            totals[e.name] += e.device_time_total / passes
            counts[e.name] += 1
    return totals, counts

out = {}
for spec in sys.argv[1:]:
    name, batch, length, layers, dtype = spec.split(":")
    batch, length, layers, dtype = int(batch), int(length), int(layers), getattr(torch, dtype)
    arch = architecture(name)
    model = build(arch, size="real", length=length, layers=layers, dtype=dtype, device="cuda")
    inputs = example_inputs(arch, model, batch=batch, length=length, device="cuda")
    record = {}
    for backend in ("lamina", "inductor"):
        torch._dynamo.reset()
        t = time.time()
        fn = torch.compile(model, backend=backend, dynamic=False)
        totals, counts = kernels(fn, inputs)
        total = sum(totals.values())
        print(f"== {spec} {backend}: {total/1000:.2f} ms per pass, {len(totals)} kernels ({time.time()-t:.0f} s)", flush=True)
        for k, v in totals.most_common(14):
            print(f"   {v/1000:8.3f} ms  {v/total*100:5.1f}%  x{counts[k]//3:<3d} {k[:110]}")
        record[backend] = {"total_us": total, "kernels": {k: [v, counts[k] // 3] for k, v in totals.most_common()}}
    out[spec] = record
    del model
    torch.cuda.empty_cache()
import os
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "profile.json"), "w"), indent=1)

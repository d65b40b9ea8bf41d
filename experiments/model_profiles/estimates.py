"""The cost model's estimate of each kernel of one compiled layer, summed (CPU, sm_90 target).

    python experiments/model_profiles/estimates.py phi3:8:512:1 qwen3:1:2048:1 llama:1:512:1
"""
import re, sys, torch, lamina
from lamina.models.architectures import architecture, build, example_inputs
for spec in sys.argv[1:]:
    name, batch, length, layers = spec.split(":"); batch, length, layers = int(batch), int(length), int(layers)
    arch = architecture(name)
    model = build(arch, size="real", length=length, layers=layers, dtype=torch.bfloat16)
    inputs = example_inputs(arch, model, batch=batch, length=length)
    c = lamina.compile(model, example_kwargs=inputs, target="sm_90")
    total, missing, rows = 0.0, [], []
    for t in c.compilation.tiles:
        e = dict(t.knobs).get("estimate", "")
        m = re.match(r"([\d.]+) us", e)
        if m:
            total += float(m.group(1)); rows.append((float(m.group(1)), t.kernel.name, t.schedule))
        else:
            missing.append(f"{t.kernel.name} ({t.schedule})")
    print(f"{spec}: estimated {total/1000:.2f} ms over {len(rows)} kernels; no estimate: {', '.join(missing)}")
    for us, k, s in sorted(rows, reverse=True)[:6]:
        print(f"   {us:9.1f} us  {s:22s} {k}")

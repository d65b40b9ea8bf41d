"""How long the split-K search takes, and what it chooses, over a few models' kernels compiled for
sm_90 on the CPU (nothing run): the seconds spent in its searches (one per distinct product) and
each kernel's chosen setting, so that a change to the search can be checked to choose the same.

    LAMINA_PROGRAM_CACHE=0 python experiments/compile_time/split_k_search_time.py \\
        llama:1:512:2 qwen2:1:128:1 bert:8:128:1 llama:1:128:1 > choices.json

Each argument is ARCH:BATCH:LENGTH:LAYERS; the seconds go to stderr, the choices to stdout.
"""
import functools
import json
import sys
import time

import torch

import lamina
from lamina.models.architectures import architecture, build, example_inputs
from lamina.plugins.schedules.contraction.split_k import fusion_rule

spent = [0.0, 0]
search = fusion_rule._choose.__wrapped__


@functools.lru_cache(maxsize=256)
def timed_search(*arguments):
    start = time.perf_counter()
    try:
        return search(*arguments)
    finally:
        spent[0] += time.perf_counter() - start
        spent[1] += 1


fusion_rule._choose = timed_search
choices = {}
for spec in sys.argv[1:]:
    name, batch, length, layers = spec.split(":")
    arch = architecture(name)
    model = build(arch, size="real", length=int(length), layers=int(layers), dtype=torch.bfloat16)
    inputs = example_inputs(arch, model, batch=int(batch), length=int(length))
    compiled = lamina.compile(model, example_kwargs=inputs, target="sm_90")
    choices[spec] = [(t.kernel.name, dict(t.knobs).get("chosen", ""), dict(t.knobs).get("split_k", ""))
                     for t in compiled.compilation.tiles]
print(f"split-K search: {spent[0]:.2f} s in {spent[1]} searches", file=sys.stderr)
json.dump(choices, sys.stdout, indent=1)

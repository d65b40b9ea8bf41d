"""What reading attention's values as they lie (along the features, transposed by the values' wgmma)
saves against copying them K-major first: the whole attention of TinyLlama's and Qwen2.5-7B's heads
and of BERT's at 512 tokens, bf16, GPU time of all of a call's kernels, each way, against eager and
float64. Run on a GPU: ``python experiments/attention_values_as_they_lie/time_values.py`` (writes
``values.json`` under ``$OUT``, or here)."""
import json
import os

import torch
import torch.nn.functional as F

import lamina
from lamina.bench.measure import float64_reference, profiled_us, relative_error
from lamina.plugins.schedules.attention import fuse_attention, recognise

_as_they_lie = recognise.values_read_as_they_lie
COPIED = [False]


def _unless_copied(found, features):
    return _as_they_lie(found, features) and not (COPIED[0] and found.layout != "k_major")


recognise.values_read_as_they_lie = fuse_attention.values_read_as_they_lie = _unless_copied


def causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


CASES = {"tinyllama 32/4 x 64": (32, 4, 64), "qwen2.5 28/4 x 128": (28, 4, 128), "bert 12/12 x 64": (12, 12, 64)}
results = {}
for name, (heads, kv_heads, depth) in CASES.items():
    torch.manual_seed(0)
    args = tuple(torch.randn(1, h, 512, depth, device="cuda", dtype=torch.bfloat16) for h in (heads, kv_heads, kv_heads))
    reference = float64_reference(causal, args)
    results[f"{name} | eager"] = profiled_us(causal, args)
    for copied in (False, True):
        COPIED[0] = copied
        compiled = lamina.compile(causal, args)
        key = f"{name} | {'copied K-major' if copied else 'as they lie'}"
        results[key] = {"us": profiled_us(compiled, args), "error": relative_error(compiled(*args), reference),
                        "eager_error": relative_error(causal(*args), reference),
                        "schedules": [t.schedule for t in compiled.compilation.tiles]}
        print(key, results[key], flush=True)
with open(os.path.join(os.environ.get("OUT", os.path.dirname(__file__)), "values.json"), "w") as f:
    json.dump(results, f, indent=1)

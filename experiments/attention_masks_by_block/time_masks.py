"""GPU time of TinyLlama's attention at 512 tokens (32 query heads, 4 key/value heads, 64 features,
bf16) under three masks: ``is_causal`` (no mask tensor), a causal bias ``where(key <= query, 0,
-65504)``, and that bias and-ed with a padding vector as Hugging Face builds it; lamina against
torch.compile and eager. Run on a GPU: ``python experiments/attention_masks_by_block/time_masks.py``
(writes ``time_masks.json`` under ``$OUT``, or here)."""
import json
import os

import torch
import torch.nn.functional as F

import lamina
from lamina.bench.measure import profiled_us

HEADS, KV_HEADS, LENGTH, DEPTH = 32, 4, 512, 64


def _bias(keep, dtype):
    return torch.where(keep, torch.tensor(0.0, dtype=dtype, device=keep.device),
                       torch.tensor(-65504.0, dtype=dtype, device=keep.device))


def causal(q, k, v, attention_mask):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def causal_bias(q, k, v, attention_mask):
    positions = torch.arange(LENGTH, device=q.device)
    keep = (positions[None, :] <= positions[:, None]).expand(1, 1, LENGTH, LENGTH)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=_bias(keep, q.dtype), enable_gqa=True)


def causal_and_padding_bias(q, k, v, attention_mask):
    batch, positions = torch.arange(1, device=q.device), torch.arange(LENGTH, device=q.device)
    b, query, key = batch[:, None, None, None], positions[None, None, :, None], positions[None, None, None, :]
    keep = ((key <= query) & attention_mask.bool()[b, key]).expand(1, -1, LENGTH, LENGTH)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=_bias(keep, q.dtype), enable_gqa=True)


torch.manual_seed(0)
args = (torch.randn(1, HEADS, LENGTH, DEPTH, device="cuda", dtype=torch.bfloat16),
        torch.randn(1, KV_HEADS, LENGTH, DEPTH, device="cuda", dtype=torch.bfloat16),
        torch.randn(1, KV_HEADS, LENGTH, DEPTH, device="cuda", dtype=torch.bfloat16),
        torch.ones(1, LENGTH, device="cuda", dtype=torch.int64))
results = {}
for fn in (causal, causal_bias, causal_and_padding_bias):
    compiled = lamina.compile(fn, args)
    results[fn.__name__] = {
        "lamina": profiled_us(compiled, args), "torch.compile": profiled_us(torch.compile(fn), args),
        "eager": profiled_us(fn, args),
        "lamina kernels": [f"{t.kernel.name}: {t.schedule}" for t in compiled.compilation.tiles]}
    print(fn.__name__, results[fn.__name__], flush=True)
out = os.path.join(os.environ.get("OUT", os.path.dirname(__file__)), "time_masks.json")
with open(out, "w") as f:
    json.dump(results, f, indent=1)

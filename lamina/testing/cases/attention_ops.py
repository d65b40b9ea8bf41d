"""Cases for the fused attention ops that PyTorch picks for ``scaled_dot_product_attention``.

Their ATen kernels run on CUDA only (the CPU's flash kernel aside), so the reference is
the computation each one stands for: the attention, and the log-sum-exp of each query's
scores in the layout the op returns it.
"""

from __future__ import annotations

import math

import torch

from lamina.testing.cases.database import register_cases
from lamina.testing.cases.samples import Case, T

ATTENTION_DTYPES = ("f32", "f16", "bf16")


def _attention(q, k, v, mask=None, is_causal=False, scale=None):
    """``(output, log-sum-exp (..., L))`` computed in float32 (float64 for float64 inputs)."""
    wide = torch.float64 if q.dtype == torch.float64 else torch.float32
    q, k, v = (t.to(wide) for t in (q, k, v))
    if k.shape[-3] != q.shape[-3]:
        k = k.repeat_interleave(q.shape[-3] // k.shape[-3], -3)
        v = v.repeat_interleave(q.shape[-3] // v.shape[-3], -3)
    scores = (q @ k.transpose(-2, -1)) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if is_causal:
        scores = scores.masked_fill(~torch.ones(scores.shape[-2:], dtype=torch.bool).tril(), -math.inf)
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else scores + mask.to(wide)
    return torch.softmax(scores, -1) @ v, torch.logsumexp(scores, -1).float()


def flash(q, k, v, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None):
    out, lse = _attention(q, k, v, None, is_causal, scale)
    return out.to(q.dtype), lse


def flash_for_cpu(q, k, v, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    out, lse = _attention(q, k, v, attn_mask, is_causal, scale)
    return out.to(q.dtype), lse


def efficient(q, k, v, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False, *, scale=None):
    out, lse = _attention(q, k, v, attn_bias, is_causal, scale)
    padded = -(-lse.shape[-1] // 32) * 32 if compute_log_sumexp else 0
    filler = torch.full(lse.shape[:-1] + (padded - lse.shape[-1],), math.inf) if padded else None
    return out.to(q.dtype), torch.cat([lse, filler], -1) if padded else lse[..., :0]


def cudnn(q, k, v, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False, return_debug_mask=False, *,
          scale=None):
    out, lse = _attention(q, k, v, attn_bias, is_causal, scale)
    return out.to(q.dtype), lse.unsqueeze(-1)


def overrideable(q, k, v, attn_bias=None, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None):
    out, lse = _attention(q, k, v, attn_bias, is_causal, scale)
    return out.to(q.dtype), lse


def _qkv(queries=17, keys=19, heads=3, kv_heads=3, features=8):
    return (T((2, heads, queries, features)), T((2, kv_heads, keys, features)), T((2, kv_heads, keys, features)))


register_cases("aten._scaled_dot_product_flash_attention.default", [
    Case("cross", (*_qkv(), 0.0, False), compiled=True),
    Case("causal_scaled", (*_qkv(keys=17), 0.0, True), {"scale": 0.5}),
], dtypes=ATTENTION_DTYPES, reference=flash)
register_cases("aten._scaled_dot_product_flash_attention_for_cpu.default", [
    Case("causal", (*_qkv(keys=17), 0.0, True), compiled=True),
    Case("boolean_mask", _qkv(), {"attn_mask": T((17, 19), dtype="b8")}),
], dtypes=ATTENTION_DTYPES, reference=flash_for_cpu)
register_cases("aten._scaled_dot_product_efficient_attention.default", [
    Case("additive_bias", (*_qkv(), T((2, 1, 17, 19)), False), compiled=True),
    Case("log_sumexp_padded", (*_qkv(queries=33, keys=33), None, True, 0.0, True), {"scale": 0.3}),
    Case("bias_through_a_slice", (*_qkv(), T((2, 3, 17, 19), "sliced"), True)),
], dtypes=ATTENTION_DTYPES, reference=efficient)
register_cases("aten._scaled_dot_product_cudnn_attention.default", [
    Case("grouped_heads", (*_qkv(heads=4, kv_heads=2), T((2, 1, 17, 19)), False), compiled=True),
    Case("causal", (*_qkv(keys=17), None, True, 0.0, True)),
], dtypes=ATTENTION_DTYPES, reference=cudnn)
register_cases("aten._scaled_dot_product_fused_attention_overrideable.default", [
    Case("additive_bias", (*_qkv(), T((17, 19))), compiled=True),
    Case("causal", (*_qkv(keys=17), None, 0.0, True)),
], dtypes=ATTENTION_DTYPES, reference=overrideable)

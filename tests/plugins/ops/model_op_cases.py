"""Cases for the ops that transformer models need: lookups, concatenation, positions, masks,
attention and norms, with shapes that are multiples of no tile size."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lamina.frontends.torch import DEFAULT_KEEP
from tests.plugins.ops.lowering import Case

KEEP_CREATION = DEFAULT_KEEP + (
    "aten.arange.default", "aten.arange.start", "aten.zeros.default", "aten.ones.default", "aten.zeros_like.default",
    "aten.ones_like.default", "aten.new_zeros.default", "aten.new_ones.default", "aten.new_full.default",
    "aten.stack.default", "aten.index_select.default", "aten.any.default", "aten.all.dim", "aten.all.default",
    "aten.any.dims", "aten.logical_and.default", "aten.logical_or.default", "aten.masked_fill.Scalar",
    "aten.masked_fill.Tensor", "aten.bitwise_or.Tensor", "aten.bitwise_not.default", "aten.triu.default",
    "aten.tril.default",
)
"""Composites that export lowers by default, kept so that their own decompositions run."""


def gathers(table, ids, short_ids, x, rows, cols, depth, picks):
    return (F.embedding(ids, table), F.embedding(short_ids, table), x[rows], x[:, cols], x[rows, :, depth],
            x[rows, cols], torch.index_select(x, 2, picks), x.bfloat16()[:, cols])


def cache_writes(cache, positions, states, rows, row_values):
    """A static cache's update (``index_copy_`` reaches lamina as ``index_put``), a write of
    rows by assignment (a position written twice: the later write wins), negative positions."""
    written = cache.clone()
    written.index_copy_(2, positions, states)
    assigned = rows.clone()
    assigned[torch.tensor([4, -1, 4])] = row_values
    return written, assigned


def writes_into_copies(x, z, mask, row, state, new):
    """Writes into a copy: slices (``slice_scatter``), under a boolean mask (``index_put`` with a
    mask: a padding mask filled), a state cache's slot (``copy``), and a flip."""
    sliced, stepped, tail, masked, rows, slot = x.clone(), x.clone(), x.clone(), x.clone(), x.clone(), state.clone()
    sliced[:, 1:4] = z
    stepped[:, 1:7:2] = z * 2
    tail[-2:] = 1.5
    masked[mask] = -2.0
    rows[mask[:, 0]] = row
    slot[1].copy_(new[..., -3:])
    return sliced, stepped, tail, masked, rows, slot, torch.flip(x, [0, -1])


def concats(a, b, c, h):
    return (torch.cat([a, b], 1), torch.cat([a, b, c], -1), torch.cat([a, a], 0), torch.cat([a, h], 1),
            torch.cat([h, h], 1), torch.stack([a, a * 2], 1), torch.stack([b, c.expand(5, 10)]))


def positions(x, i, h):
    return (torch.arange(23) * x, torch.arange(3, 26) + i, torch.arange(1, 70, 3, dtype=torch.float32) * x,
            torch.arange(0.5, 12, 0.5) * x, x.cumsum(1), x.cumsum(0), (x > 0).cumsum(-1), i.cumsum(0),
            x.cumsum(1, dtype=torch.float64), h.cumsum(1))


def masks(x, y, m, n):
    return (x.triu(), x.triu(2), x.tril(), x.tril(-1), n.tril(1), m & (x > 0), m | (y > 0), m & True, m | False, ~m,
            torch.logical_not(x > 0), torch.logical_and(m, y > 0), torch.logical_or(m, x), m.any(1), m.any(),
            n.any(dim=(0, 2)), x.any(0), m.all(1), n.all(), x.masked_fill(m, -1.5),
            x.masked_fill(m, torch.tensor(2.0)), torch.where(x.triu(1) > 0, x, y))


def attention(q, k, v, kg, vg, wide, attend, bias):
    return (F.scaled_dot_product_attention(q, k, v),
            F.scaled_dot_product_attention(q, k, v, is_causal=True),
            F.scaled_dot_product_attention(q, kg, vg, is_causal=True, enable_gqa=True),
            F.scaled_dot_product_attention(q, kg, vg, attn_mask=attend, enable_gqa=True),
            F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=0.3),
            F.scaled_dot_product_attention(q, k, wide))


def norms(x, w, h, hw):
    return (F.rms_norm(x, (64,), w, eps=1e-6), F.rms_norm(x, (5, 64)), F.rms_norm(h, (64,), hw, eps=1e-5),
            F.rms_norm(x, (64,)))


def layer_norms(x, w, bias, h, hw):
    return (F.layer_norm(x, (64,), w, bias), F.layer_norm(x, (5, 64), eps=1e-6), F.layer_norm(h, (64,), hw, None))


def splits(x, fused, picks):
    q, k, v = fused.split(16, dim=-1)
    heads = x.unbind(1)
    first, rest = x.split([1, 4], dim=1)
    return (q, k * 2, v, *x.chunk(2, -1), heads[0], heads[1] + heads[4], first, rest, torch.gather(x, 2, picks))


def flash_attention_on_the_cpu(q, k, v, bias):
    return (torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True)[0],
            *torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, attn_mask=bias, scale=0.5))


def fills(s):
    return (torch.zeros(3, 4) + s, torch.ones(3, 4, dtype=torch.int32) + s, torch.zeros_like(s), torch.ones_like(s),
            s.new_zeros(2, 3), s.new_ones((4,)), s.new_full((2, 2), 3.5), torch.full_like(s, 7))


def vision_and_audio(x, h, weight, bias, images):
    """ReLU6 (MobileNet), vector norms (Swin-v2's cosine attention, wav2vec2's weight norm) and group norms
    (PoolFormer, wav2vec2's feature encoder)."""
    norms = tuple(torch.linalg.vector_norm(x, order, dim=-1) for order in (2, 1, 3, float("inf"), float("-inf"), 0))
    return (F.hardtanh(x, 0.0, 6.0), F.hardtanh(h), *norms, torch.linalg.vector_norm(x, dim=(0, 1), keepdim=True),
            torch.linalg.vector_norm(h, dim=-1), F.group_norm(images, 3, weight, bias), F.group_norm(images, 1),
            F.group_norm(images.bfloat16(), 6, weight.bfloat16()))


def overlapping_chunks(x, w):
    """Longformer's chunks of a sequence, overlapping by half (``as_strided``), of a tensor and of a
    transposed product, whose storage eager orders column by column."""
    y = (x @ w).transpose(0, 1)
    return torch.as_strided(x, (3, 4, 9), (4 * 9, 9, 1)), torch.as_strided(y, (2, 8, 11), (88, 11, 1), 3)


def _attention_inputs(dtype=torch.float32):
    def make(*shape):
        return torch.randn(shape, dtype=dtype)

    attend = torch.rand(13, 21) > 0.5
    attend[:, 0] = True
    attend[5] = False  # a query that sees no key: zeros, as eager gives
    bias = torch.randn(2, 1, 13, 21, dtype=dtype)
    return (make(2, 4, 13, 16), make(2, 4, 21, 16), make(2, 4, 21, 16), make(2, 2, 21, 16), make(2, 2, 21, 16),
            make(2, 4, 21, 24), attend, bias)


MODEL_OP_CASES = [
    Case("gathers", gathers, lambda: (
        torch.randn(37, 19), torch.randint(0, 37, (3, 11)), torch.randint(0, 37, (5,), dtype=torch.int32),
        torch.randn(7, 9, 5), torch.randint(-7, 7, (4, 3)), torch.randint(-9, 9, (3,)), torch.randint(-5, 5, (4, 1)),
        torch.randint(0, 5, (6,))), keep=KEEP_CREATION),
    Case("cache-writes", cache_writes, lambda: (
        torch.randn(2, 3, 11, 5), torch.tensor([7, 2, 9]), torch.randn(2, 3, 3, 5), torch.randn(9, 6),
        torch.randn(3, 6)), keep=KEEP_CREATION),
    Case("writes-into-copies", writes_into_copies, lambda: (
        torch.randn(6, 7), torch.randn(6, 3), torch.rand(6, 7) > 0.5, torch.randn(7), torch.randn(4, 6, 3),
        torch.randn(6, 8, dtype=torch.float64)), keep=KEEP_CREATION),
    Case("concats", concats, lambda: (torch.randn(5, 7), torch.randn(5, 10), torch.randn(5, 1),
                                      torch.randn(5, 3, dtype=torch.float16)), keep=KEEP_CREATION),
    Case("positions", positions, lambda: (torch.randn(5, 23), torch.randint(-9, 9, (23,)),
                                          torch.randn(3, 29, dtype=torch.bfloat16)), keep=KEEP_CREATION),
    Case("masks", masks, lambda: (torch.randn(6, 9), torch.randn(6, 9), torch.rand(6, 9) > 0.5,
                                  torch.rand(2, 6, 9) > 0.3), keep=KEEP_CREATION),
    Case("attention", attention, _attention_inputs),
    Case("attention-bf16", attention, lambda: _attention_inputs(torch.bfloat16)),
    Case("norms", norms, lambda: (torch.randn(3, 5, 64), torch.randn(64), torch.randn(7, 64, dtype=torch.bfloat16),
                                  torch.randn(64, dtype=torch.bfloat16))),
    Case("fills", fills, lambda: (torch.randn(3, 4),), keep=KEEP_CREATION),
    Case("overlapping-chunks", overlapping_chunks, lambda: (torch.randn(13, 9), torch.randn(9, 16))),
    Case("vision-and-audio", vision_and_audio, lambda: (
        torch.randn(5, 7, 13) * 4, torch.randn(3, 21, dtype=torch.bfloat16), torch.randn(6), torch.randn(6),
        torch.randn(2, 6, 5, 7))),
    Case("layer-norms", layer_norms, lambda: (torch.randn(3, 5, 64), torch.randn(64), torch.randn(64),
                                              torch.randn(7, 64, dtype=torch.bfloat16),
                                              torch.randn(64, dtype=torch.bfloat16))),
    Case("splits", splits, lambda: (torch.randn(3, 5, 6), torch.randn(2, 13, 48), torch.randint(0, 6, (3, 5, 4))),
         keep=DEFAULT_KEEP + ("aten.split.Tensor", "aten.unbind.int")),
    Case("flash-attention-on-the-cpu", flash_attention_on_the_cpu, lambda: (
        torch.randn(2, 4, 13, 16), torch.randn(2, 4, 13, 16), torch.randn(2, 4, 13, 16), torch.randn(13, 13)),
         keep=DEFAULT_KEEP + ("aten._scaled_dot_product_flash_attention_for_cpu.default",)),
]

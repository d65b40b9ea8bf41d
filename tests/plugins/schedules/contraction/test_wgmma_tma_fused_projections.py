"""Attention over a fused query-key-value projection's output on the TMA GEMM.

GPT-2 and Phi-3 compute the queries, keys and values in one linear and split its output:
the keys lie in each row after the queries, and every head's after the one before it.
The TMA reads such an operand in place (its tensor map starts those columns into each row);
the values, which the second product sums along the positions, get a K-major copy.
"""

import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.bench.measure import relative_error

from ..contraction_kernels import THREE_KERNELS


TMA = "wgmma 16-bit tma"
SMALL = {"contraction": {"products": "wgmma_tma", "block_m": 64, "block_n": 64, "stages": 2,
                         "consumer_warpgroups": 1}}


def fused_attention(heads: int, head_size: int):
    def attention(qkv):
        batch, length, _ = qkv.shape
        q, k, v = (t.view(batch, length, heads, head_size).transpose(1, 2)
                   for t in qkv.split(heads * head_size, dim=-1))
        return F.scaled_dot_product_attention(q, k, v, is_causal=True), v
    return attention


def test_the_keys_are_read_in_place_and_both_products_run_on_it():
    attention = fused_attention(3, 64)
    torch.manual_seed(11)
    qkv = torch.randn(1, 80, 3 * 3 * 64, dtype=torch.bfloat16)
    compiled = lamina.compile(attention, (qkv,), target="sm_90", knobs=SMALL, disable=THREE_KERNELS)
    assert [t.settings.products for t in compiled.compilation.tiles if t.schedule == "contraction"] == [TMA, TMA]
    loop = compiled.ir("loop")
    assert "kernel scaled_dot_product_attention_sum(qkv: bf16[1, 80, 576])" in loop  # queries and keys in place
    copies = [line.strip() for line in loop.splitlines() if line.strip().startswith("buffer") and "k_major" in line]
    assert copies == ["buffer transpose_2_k_major: bf16[3, 64, 80]"]  # the values, per head, the positions last
    out, values = compiled(qkv)
    expected = attention(qkv.double())
    assert torch.equal(values, attention(qkv)[1])
    assert relative_error(out, expected[0]) <= 1.25 * relative_error(attention(qkv)[0], expected[0])


def test_heads_narrower_than_a_k_tile_compile_and_match_eager():
    """A 32-wide head is half a 64-deep k-tile, which would read the next head's keys: the scores
    stay on the CUDA cores, and no copy is made that inlining would undo (the two rules once
    undid each other until fusion gave up)."""
    attention = fused_attention(2, 32)
    torch.manual_seed(12)
    qkv = torch.randn(1, 72, 3 * 2 * 32, dtype=torch.bfloat16)
    compiled = lamina.compile(attention, (qkv,), target="sm_90")
    out, values = compiled(qkv)
    expected = attention(qkv.double())
    assert torch.equal(values, attention(qkv)[1])
    assert relative_error(out, expected[0]) <= 1.25 * relative_error(attention(qkv)[0], expected[0])


@pytest.mark.gpu
@pytest.mark.parametrize("heads, head_size, length", [(12, 64, 512), (32, 96, 333)])
def test_attention_over_a_fused_projection_matches_eager_on_the_gpu(heads, head_size, length):
    """GPT-2's heads (12 of 64) and Phi-3's (32 of 96: not whole k-tiles, so its scores keep the
    CUDA cores, and its values the copy)."""
    attention = fused_attention(heads, head_size)
    torch.manual_seed(13)
    qkv = torch.randn(2, length, 3 * heads * head_size, dtype=torch.bfloat16, device="cuda")
    compiled = lamina.compile(attention, (qkv,))
    out, values = compiled(qkv)
    expected = attention(qkv.double())
    assert torch.equal(values, attention(qkv)[1])
    assert relative_error(out, expected[0]) <= 1.25 * relative_error(attention(qkv)[0], expected[0])

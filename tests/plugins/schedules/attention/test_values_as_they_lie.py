"""Attention's values read as they lie, along the features (N-major), by the attention kernel and by
the Hopper GEMM: as ``scaled_dot_product_attention`` receives them, and straight from a value
projection's output, where the heads of a group lie side by side in each row. On the simulator,
against float64."""

import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.bench.measure import float64_reference, relative_error
from lamina.plugins.schedules.attention.tiling import VALUES_ALONG_FEATURES

from ..nvrtc_in_background import start_compiling
from .test_attention import SLACK, causal_attention, qkv, schedules


def values_from_a_projection(q, k, xv):
    """Values as a decoder's value projection gives them: (tokens, key-value heads x features),
    viewed per head; grouped query heads share a key-value head."""
    length, depth = xv.shape[0], q.shape[-1]
    v = xv.view(1, length, -1, depth).transpose(1, 2)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def check(fn, args, knobs=None):
    compiled = lamina.compile(fn, args, target="sm_90", knobs=knobs or {})
    reference = float64_reference(fn, args)
    assert relative_error(compiled(*args), reference) <= 1.25 * relative_error(fn(*args), reference) + SLACK
    return compiled


def attention_tile(compiled) -> str:
    tile = compiled.ir("tile")
    return tile[tile.index("schedule=attention"):]


@pytest.mark.parametrize("heads, kv_heads, depth", [(4, 2, 64), (2, 1, 128)], ids=["one_panel", "two_panels"])
def test_the_attention_kernel_stages_the_values_as_they_lie(heads, kv_heads, depth):
    """128 keys, whole k-tiles: no copy of the values before the kernel."""
    torch.manual_seed(heads + depth)
    compiled = check(causal_attention, qkv(heads, kv_heads, 128, depth))
    assert schedules(compiled) == ["attention"]
    assert VALUES_ALONG_FEATURES in attention_tile(compiled)


def test_values_of_grouped_heads_are_read_in_place_from_the_projection():
    """Row ``t`` of the value projection's output holds every key-value head's features of token
    ``t``: head ``h // group`` starts ``(h // group) * 64`` columns in."""
    torch.manual_seed(21)
    q, k, _ = qkv(4, 2, 128, 64)
    xv = torch.randn(128, 2 * 64, dtype=torch.bfloat16)
    compiled = check(values_from_a_projection, (q, k, xv))
    assert schedules(compiled) == ["attention"]
    assert VALUES_ALONG_FEATURES in attention_tile(compiled)
    assert "shared xv[r4, i1 // 2 * 64 + i3] as bf16[r4 128][i3 64, 128-byte swizzle]" in attention_tile(compiled)


@pytest.mark.parametrize("length, depth, why", [(130, 64, "ragged"), (128, 80, "features")],
                         ids=["keys_past_the_head", "features_not_whole_panels"])
def test_values_the_kernel_cannot_read_as_they_lie_are_copied_first(length, depth, why):
    """130 keys: the last k-tile's rows would run into the next head's values. 80 features: the
    values' wgmma reads them transposed in whole panels of 64 only."""
    torch.manual_seed(length + depth)
    compiled = check(causal_attention, qkv(4, 2, length, depth))
    assert "attention" in schedules(compiled) and "transpose" in schedules(compiled)
    assert VALUES_ALONG_FEATURES not in attention_tile(compiled)


def test_the_hopper_gemm_reads_grouped_values_in_place_where_attention_stays_three_kernels():
    """48 queries, fewer than a wgmma's 64: the products and the softmax stay apart, and the values'
    product reads the projection's output along the features, each group's head at its columns."""
    torch.manual_seed(22)
    q, k, _ = qkv(4, 2, 48, 64)
    xv = torch.randn(48, 2 * 64, dtype=torch.bfloat16)
    compiled = check(values_from_a_projection, (q, k, xv), {"contraction": {"products": "wgmma_tma"}})
    assert "attention" not in schedules(compiled) and "transpose" not in schedules(compiled)
    tile = compiled.ir("tile")
    assert "B n-major: staged as it lies, along n, in panels of 64 columns" in tile
    assert "shared xv[r0, i1 // 2 * 64 + i3] as bf16[r0 64][i3 64, 128-byte swizzle]" in tile


def test_the_kernel_that_reads_values_as_they_lie_compiles_without_spills():
    """TinyLlama's heads at 512 tokens."""
    q, k, v = (torch.randn(1, h, 512, 64, dtype=torch.bfloat16) for h in (32, 4, 4))
    compiled = lamina.compile(causal_attention, (q, k, v), target="sm_90")
    (kernel,) = [kern for kern, tile in zip(compiled.compilation.kernels.kernels, compiled.compilation.tiles)
                 if tile.schedule == "attention"]
    assert any(m.box == (128, 64) for m in kernel.tensor_maps)
    built = start_compiling(kernel, "sm_90a").result()
    assert built.registers > 0 and (built.spill_stores, built.spill_loads) == (0, 0)

"""Float32 attention of a prompt's queries in one kernel (``attention_float32``): the fusion of
the softmax into the values' product, the products as three tf32 products on ``mma.sync``, run
by the simulator and checked against float64 (as close as eager float32); compiled by NVRTC
without spills; run on the GPU."""

import math

import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.bench.measure import float64_reference, relative_error
from lamina.plugins.schedules.attention.float32 import writer as float32_writer

from ..nvrtc_in_background import start_compiling

from .test_attention import SLACK, masked_attention, schedules

PINNED = {"attention_float32": {"block_queries": 64}}
"""The one kernel runs wherever a knob of its schedule is pinned."""


def attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


def causal_attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def qkv(heads, kv_heads, length, depth, batch=1, device="cpu"):
    return (torch.randn(batch, heads, length, depth, device=device),
            *(torch.randn(batch, kv_heads, length, depth, device=device) for _ in range(2)))


def check(fn, args, knobs=PINNED):
    compiled = lamina.compile(fn, args, target="sm_90", knobs=knobs)
    assert schedules(compiled) == ["attention_float32"], schedules(compiled)
    reference = float64_reference(fn, args)
    assert relative_error(compiled(*args), reference) <= 1.25 * relative_error(fn(*args), reference) + 1e-6
    return compiled


@pytest.mark.parametrize("fn", [attention, causal_attention], ids=["full", "causal"])
@pytest.mark.parametrize("heads, kv_heads, length, depth, knobs", [
    (2, 2, 70, 64, {"block_queries": 64}),                            # queries and keys past a tile's end
    (4, 2, 130, 64, {"block_queries": 64, "keys_per_tile": 64}),      # two query heads a key-value head
    (2, 1, 100, 80, {"block_queries": 128, "stages": 3}),             # 80 features, three stages
    (1, 1, 96, 128, {"block_queries": 64, "keys_per_tile": 32, "stages": 3}),
])
def test_matches_float64_on_the_simulator(fn, heads, kv_heads, length, depth, knobs):
    torch.manual_seed(heads * length + depth)
    check(fn, qkv(heads, kv_heads, length, depth), {"attention_float32": knobs})


@pytest.mark.parametrize("kind", ["boolean", "additive"])
def test_masks_are_read_where_the_scores_are_computed(kind):
    """A padding mask of each key and a mask of each query and key, one query seeing no key."""
    torch.manual_seed(4)
    q, k, v = qkv(2, 2, 90, 64, batch=2)
    keep = torch.rand(2, 1, 90, 90) > 0.3
    keep[1, :, 5] = False
    mask = keep if kind == "boolean" else torch.where(keep, 0.0, -math.inf)
    compiled = check(masked_attention, (q, k, v, mask))
    if kind == "boolean":  # PyTorch gives a query that sees no key zeros
        assert torch.equal(compiled(q, k, v, mask)[1, :, 5], torch.zeros_like(q[1, :, 5]))


def test_a_planted_fault_in_the_rescaling_is_caught(monkeypatch):
    """Without the rescaled output when a later tile raises the running maximum, the sums of the
    earlier tiles count at the wrong scale: the numbers check catches it."""
    original = float32_writer.Float32AttentionWriter._softmax

    def without_rescaling(self):
        return [s for s in original(self) if not (getattr(s, "array", None) == self.n["out"])]

    monkeypatch.setattr(float32_writer.Float32AttentionWriter, "_softmax", without_rescaling)
    torch.manual_seed(15)
    q, k, v = qkv(2, 2, 128, 64)
    k[:, :, 64:] *= 3
    compiled = lamina.compile(attention, (q, k, v), target="sm_90",
                              knobs={"attention_float32": {"keys_per_tile": 32}})
    reference = float64_reference(attention, (q, k, v))
    assert relative_error(compiled(q, k, v), reference) > 10 * relative_error(attention(q, k, v), reference)


def test_a_single_tf32_product_is_not_float32_accurate(monkeypatch):
    """The three tf32 products are what keeps float32's accuracy: with only the big pieces'
    product, the error is a tf32 product's, hundreds of times eager's."""
    monkeypatch.setattr(float32_writer, "SIZES", (("big", "big"),))
    torch.manual_seed(7)
    args = qkv(2, 2, 64, 64)
    compiled = lamina.compile(attention, args, target="sm_90", knobs=PINNED)
    reference = float64_reference(attention, args)
    assert relative_error(compiled(*args), reference) > 100 * relative_error(attention(*args), reference)


@pytest.mark.parametrize("heads, kv_heads, length, depth, causal, fused", [
    (32, 4, 2048, 64, True, True),     # TinyLlama, long: one kernel 1.46x the kernels apart on an H100
    (12, 12, 512, 64, False, False),   # BERT: one kernel 0.56x
    (28, 4, 2048, 128, True, False),   # Qwen2.5-7B: one kernel 0.98x at best
])
def test_unpinned_the_one_kernel_runs_where_its_estimate_is_below_the_kernels_it_replaces(
        heads, kv_heads, length, depth, causal, fused):
    """The cases of ``experiments/float32_attention/``, where it was timed against them."""
    args = qkv(heads, kv_heads, length, depth)
    compiled = lamina.compile(causal_attention if causal else attention, args, target="sm_90")
    assert ("attention_float32" in schedules(compiled)) == fused, schedules(compiled)


def test_pinned_the_one_kernel_runs_and_the_tile_ir_says_how():
    q, k, v = qkv(8, 2, 4096, 64)
    tile = lamina.compile(causal_attention, (q, k, v), target="sm_90", knobs=PINNED).ir("tile")
    assert "mma.sync m16n8k8, each float32 product as three tf32 products" in tile
    assert "the key tiles after its last query's skipped (causal)" in tile


def test_sixteen_bit_attention_and_decoding_steps_go_to_their_own_schedules():
    q, k, v = qkv(2, 2, 128, 64)
    bf16 = lamina.compile(attention, (q.bfloat16(), k.bfloat16(), v.bfloat16()), target="sm_90", knobs=PINNED)
    assert "attention_float32" not in schedules(bf16)
    step = lamina.compile(attention, (q[:, :, :1], k, v), target="sm_90")
    assert "attention_float32" not in schedules(step)


def test_the_tile_ir_reads_as_written():
    compiled = lamina.compile(causal_attention, qkv(4, 2, 100, 64), target="sm_90", knobs=PINNED)
    assert compiled.ir("tile").strip() == GOLDEN_TILE.strip()


GOLDEN_TILE = """\
tile scaled_dot_product_attention  schedule=attention_float32
  grid (2, 4, 1) blocks of 128 threads, 104448 B shared
  parallel i2 (100): block.x tile 64 = thread.x 1 x 64 per thread (contiguous)
  parallel i1 (4): block.y tile 1 = thread.x 1 x 1 per thread (contiguous)
  reduce r0 (100): serial, step 64, online softmax across the tiles
  shared k[0, i1 // 2, r0, r1] as f32[r0 64][r1 64 + pad 4], 2 buffers, copy cp.async 16 B
  shared v[0, i1 // 2, r4, i3] as f32[r4 64][i3 64 + pad 4], 2 buffers, copy cp.async 16 B
  rows: 64 queries per block, 16 a warp (4 warps); the queries split once into tf32 pieces (big and small) in shared memory, 64 + pad 4 floats a row
  products on tensor cores: mma.sync m16n8k8, each float32 product as three tf32 products (small by big, big by small, big by big) summed from zero and added in float32; the scores stay in registers as the probabilities' A fragments
  chosen = 64 queries per block, key tiles of 64, 2 stages, the key tiles after its last query's skipped (causal); cheapest of 4 settings, pinned: block_queries = 64
  estimate = 23.4 us
"""


@pytest.mark.parametrize("heads, kv_heads, depth, length, knobs", [
    (32, 4, 64, 512, {"block_queries": 64, "keys_per_tile": 64}),     # TinyLlama
    (32, 4, 64, 512, {"block_queries": 128, "keys_per_tile": 64, "stages": 3}),
    (28, 4, 128, 512, {"block_queries": 64, "keys_per_tile": 32}),    # Qwen2.5-7B
    (28, 4, 128, 512, {"block_queries": 128, "keys_per_tile": 32}),
    (12, 12, 80, 512, {"block_queries": 128, "keys_per_tile": 32}),   # Phi-3's 96 is alike
])
def test_compiles_for_sm_90a_without_spills(heads, kv_heads, depth, length, knobs):
    q, k, v = (torch.randn(1, h, length, depth) for h in (heads, kv_heads, kv_heads))
    compiled = lamina.compile(causal_attention, (q, k, v), target="sm_90", knobs={"attention_float32": knobs})
    (kernel,) = [kern for kern, tile in zip(compiled.compilation.kernels.kernels, compiled.compilation.tiles)
                 if tile.schedule == "attention_float32"]
    built = start_compiling(kernel, "sm_90a").result()
    assert built.registers > 0 and (built.spill_stores, built.spill_loads) == (0, 0)


@pytest.mark.gpu
@pytest.mark.parametrize("fn", [attention, causal_attention], ids=["full", "causal"])
@pytest.mark.parametrize("heads, kv_heads, depth, length", [(32, 4, 64, 512), (28, 4, 128, 2048), (12, 12, 64, 1500),
                                                            (12, 12, 80, 300)])
@pytest.mark.parametrize("knobs", [{"block_queries": 64}, {"block_queries": 128, "keys_per_tile": 32}],
                         ids=["64_queries", "128_queries"])
def test_matches_eager_on_the_gpu(fn, heads, kv_heads, depth, length, knobs):
    torch.manual_seed(16)
    q, k, v = (torch.randn(1, h, length, depth, device="cuda") for h in (heads, kv_heads, kv_heads))
    compiled = lamina.compile(fn, (q, k, v), knobs={"attention_float32": knobs})
    assert schedules(compiled) == ["attention_float32"]
    reference = float64_reference(fn, (q, k, v))
    assert relative_error(compiled(q, k, v), reference) <= 1.25 * relative_error(fn(q, k, v), reference) + SLACK

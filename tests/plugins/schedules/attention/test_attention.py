"""Attention in one kernel on Hopper: the fusion of scores, softmax and values, its schedule, and
the kernel it writes, run by the simulator (zero-filled TMA boxes, mbarrier phases, wgmma) and
checked against float64; compiled by NVRTC for sm_90a without spills; run on the GPU."""

import attrs
import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.bench.measure import float64_reference, relative_error
from lamina.core.errors import SimulationError
from lamina.core.ir import kernel_ir
from lamina.plugins.schedules.attention import writer as attention_writer

from ..nvrtc_in_background import start_compiling

SLACK = 1e-3
PINNED = {"attention": {"stages": 2}}
"""A pinned knob of the schedule fuses where the cost model would keep small shapes apart."""


def attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


def causal_attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def masked_attention(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


def qkv(heads, kv_heads, length, depth, dtype=torch.bfloat16, batch=1, keys=None):
    keys = length if keys is None else keys
    return (torch.randn(batch, heads, length, depth, dtype=dtype), torch.randn(batch, kv_heads, keys, depth, dtype=dtype),
            torch.randn(batch, kv_heads, keys, depth, dtype=dtype))


def schedules(compiled) -> list[str]:
    return [t.schedule for t in compiled.compilation.tiles]


def check(fn, args, knobs=None):
    compiled = lamina.compile(fn, args, target="sm_90", knobs=knobs or {})
    assert "attention" in schedules(compiled), schedules(compiled)
    reference = float64_reference(fn, args)
    assert relative_error(compiled(*args), reference) <= 1.25 * relative_error(fn(*args), reference) + SLACK
    return compiled


@pytest.mark.parametrize("fn", [attention, causal_attention], ids=["full", "causal"])
@pytest.mark.parametrize("heads, kv_heads, length, depth", [
    (2, 2, 64, 64),     # one query block, one key block
    (4, 2, 130, 64),    # ragged: 130 queries and keys, two heads per key-value head
    (7, 1, 100, 80),    # seven heads per key-value head, 80 features (a second, zero-filled panel)
    (2, 1, 200, 128),   # several key blocks, 128 features
    (2, 1, 130, 256),   # 256 features (Gemma's heads): key blocks of 64 only
])
def test_matches_float64_on_the_simulator(fn, heads, kv_heads, length, depth):
    torch.manual_seed(heads * length + depth)
    check(fn, qkv(heads, kv_heads, length, depth))


@pytest.mark.parametrize("knobs", [{"block_queries": 128, "block_keys": 64, "stages": 3},
                                   {"block_queries": 64, "block_keys": 64, "stages": 2}],
                         ids=["two_warpgroups_three_stages", "one_warpgroup_small_key_blocks"])
def test_pinned_knobs_run_and_show_in_the_tile_ir(knobs):
    torch.manual_seed(11)
    compiled = check(causal_attention, qkv(2, 1, 190, 64), {"attention": knobs})
    assert f"{knobs['block_queries']} queries x {knobs['block_keys']} keys, {knobs['stages']} stages" in compiled.ir("tile")


PING_PONG = {"block_queries": 128, "warpgroups": "ping_pong"}


@pytest.mark.parametrize("fn", [attention, causal_attention], ids=["full", "causal"])
@pytest.mark.parametrize("heads, kv_heads, length, depth, knobs", [
    (2, 1, 190, 64, {"block_keys": 64, "stages": 3}),     # ragged, several key blocks, a deep ring
    (4, 2, 130, 80, {"block_keys": 128, "stages": 2}),    # 80 features, values copied along the keys
    (2, 1, 300, 128, {"block_keys": 128, "stages": 3}),
])
def test_warpgroups_taking_turns_match_float64_on_the_simulator(fn, heads, kv_heads, length, depth, knobs):
    """The two warpgroups of a block issue their products in turn (each waiting on its turn
    barrier), and the second one's first thread refills the stages."""
    torch.manual_seed(heads + length + depth)
    compiled = check(fn, qkv(heads, kv_heads, length, depth), {"attention": {**PING_PONG, **knobs}})
    tile = compiled.ir("tile")
    assert "stages, warpgroups in turn;" in tile and "refilled by the first thread of the second warpgroup" in tile


def test_warpgroups_that_never_start_taking_turns_are_a_deadlock_the_simulator_reports(monkeypatch):
    """Without the second warpgroup's first arrival, each warpgroup waits for the other's turn."""
    original = attention_writer.AttentionWriter._walk

    def no_first_turn(self):
        (divergent,) = original(self)
        return [attrs.evolve(divergent, body=divergent.body[1:])]

    monkeypatch.setattr(attention_writer.AttentionWriter, "_walk", no_first_turn)
    torch.manual_seed(19)
    q, k, v = qkv(2, 1, 130, 64)
    compiled = lamina.compile(attention, (q, k, v), target="sm_90", knobs={"attention": PING_PONG})
    with pytest.raises(SimulationError, match="deadlock"):
        compiled(q, k, v)


def test_taking_turns_needs_two_warpgroups():
    from lamina.backends.cuda.targets import SM90
    from lamina.plugins.schedules.attention.plugin import AttentionSchedule

    compiled = lamina.compile(attention, qkv(2, 1, 130, 64), target="sm_90", knobs=PINNED)
    (kernel,) = [t.kernel for t in compiled.compilation.tiles if t.schedule == "attention"]
    with pytest.raises(lamina.LaminaError, match="needs block_queries = 128, not 64"):
        AttentionSchedule().schedule(kernel, SM90, {"block_queries": 64, "warpgroups": "ping_pong"})
    assert "warpgroups in turn" in dict(AttentionSchedule().schedule(kernel, SM90, {"warpgroups": "ping_pong"}).knobs)[
        "chosen"]


def one_key_value_head(q, k, v):
    """Every query head reads the one key-value head (Gemma's multi-query attention), the output
    laid out position by position as a model stores it: the heads are rows of both products as
    much as the positions are."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).transpose(1, 2)


@pytest.mark.parametrize("depth", [64, 256])
def test_one_key_value_head_runs_its_blocks_along_the_positions(depth):
    torch.manual_seed(depth)
    compiled = check(one_key_value_head, qkv(4, 1, 130, depth), PINNED)
    tile = compiled.ir("tile")
    assert "(130): block.x" in tile, tile  # the 130 positions, not the 4 heads
    assert "causal: key blocks past the block's last visible key are skipped" in tile


def positions_from_five(q, k, v):
    """A causal mask of positions that start past zero (a model's positions after a cache offset):
    ``key + 5 <= query + 5``."""
    queries = torch.arange(q.shape[-2]) + 5
    keys = torch.arange(k.shape[-2]) + 5
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keys[None, :] <= queries[:, None], enable_gqa=True)


def lower_triangle(q, k, v):
    """A causal mask as the lower triangle of ones: ``key - query <= 0``."""
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


@pytest.mark.parametrize("fn", [positions_from_five, lower_triangle])
def test_a_causal_mask_however_written_skips_the_key_blocks_past_the_diagonal(fn):
    torch.manual_seed(19)
    compiled = check(fn, qkv(4, 2, 130, 64), PINNED)
    assert "causal: key blocks past the block's last visible key are skipped" in compiled.ir("tile")


def sliding_window(q, k, v, window=50):
    """Mistral's mask: each query sees itself and the ``window - 1`` keys before it."""
    queries, keys = torch.arange(q.shape[-2]), torch.arange(k.shape[-2])
    mask = (keys[None, :] <= queries[:, None]) & (keys[None, :] > queries[:, None] - window)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


@pytest.mark.parametrize("knobs", [{"block_queries": 64, "block_keys": 64, "stages": 2},
                                   {"block_queries": 128, "block_keys": 64, "stages": 3}])
def test_a_sliding_window_skips_the_key_blocks_before_it(knobs):
    """300 queries in a window of 50: a block of 64 or 128 queries walks two or three key blocks
    of 64, from the one that holds its first query's first visible key. The values of the first
    key block are NaN: a block that read them would give NaN (a probability of 0 times NaN), so
    the queries from 128 on, whose blocks start past it, show that it was skipped."""
    torch.manual_seed(20)
    q, k, v = qkv(4, 2, 300, 64)
    compiled = check(sliding_window, (q, k, v), {"attention": knobs})
    poisoned = v.clone()
    poisoned[:, :, :64] = float("nan")
    out = compiled(q, k, poisoned)
    assert torch.isnan(out[:, :, :64]).any()
    assert torch.equal(out[:, :, 128:], compiled(q, k, v)[:, :, 128:])
    tile = compiled.ir("tile")
    assert "sliding window: key blocks before the block's first visible key are skipped" in tile
    assert "causal: key blocks past the block's last visible key are skipped" in tile
    assert "skipped_key_blocks" in compiled.ir("kernel")
    (kernel,) = [kern for kern, t in zip(compiled.compilation.kernels.kernels, compiled.compilation.tiles)
                 if t.schedule == "attention"]
    built = start_compiling(kernel, "sm_90a").result()
    assert built.registers > 0 and (built.spill_stores, built.spill_loads) == (0, 0)


def test_float16_and_a_batch_of_two():
    torch.manual_seed(12)
    check(causal_attention, qkv(4, 2, 96, 64, dtype=torch.float16, batch=2))


@pytest.mark.parametrize("kind", ["boolean", "additive"])
def test_masks_are_read_where_the_scores_are_computed(kind):
    torch.manual_seed(13)
    q, k, v = qkv(4, 2, 100, 64, batch=2)
    if kind == "boolean":
        mask = torch.rand(100, 100) > 0.3
        mask[:, 0] = True
    else:
        mask = torch.randn(2, 1, 100, 100, dtype=torch.bfloat16)
    check(masked_attention, (q, k, v, mask), PINNED)


def _rope(x, inverse_frequencies):
    angles = torch.arange(x.shape[-2]).float()[:, None] * inverse_frequencies[None, :]
    angles = torch.cat((angles, angles), -1)
    half = x.shape[-1] // 2
    return x * angles.cos().to(x.dtype) + torch.cat((-x[..., half:], x[..., :half]), -1) * angles.sin().to(x.dtype)


def decoder_attention(xq, xk, v, attention_mask, inverse_frequencies):
    """A decoder's attention as torch.compile hands it to lamina on CUDA: queries and keys rotated
    (RoPE) from the projections' outputs, a causal mask combined with the padding mask, the output
    stored position by position."""
    length, kv_heads, depth = v.shape[-2], v.shape[-3], v.shape[-1]
    q = _rope(xq.view(1, length, -1, depth).transpose(1, 2), inverse_frequencies)
    k = _rope(xk.view(1, length, kv_heads, depth).transpose(1, 2), inverse_frequencies)
    positions = torch.arange(length)
    mask = (positions[None, :] <= positions[:, None])[None, None] & attention_mask[:, None, None, :].bool()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True).transpose(1, 2)


def test_a_decoders_rotated_queries_stay_an_operand_of_the_attention_kernel():
    """The rotated queries are a kernel of their own, read by the attention kernel's TMA: inlined
    into it, they would leave the kernel to the generic schedule."""
    torch.manual_seed(14)
    length = 96
    args = (torch.randn(length, 4 * 64, dtype=torch.bfloat16), torch.randn(length, 2 * 64, dtype=torch.bfloat16),
            torch.randn(1, 2, length, 64, dtype=torch.bfloat16), torch.ones(1, length, dtype=torch.int64),
            1.0 / 10000 ** (torch.arange(0, 64, 2).float() / 64))
    compiled = check(decoder_attention, args, PINNED)
    assert "generic" not in schedules(compiled)
    assert "causal: key blocks past the block's last visible key are skipped" in compiled.ir("tile")


def _decoder_layer_attention(heads, kv_heads, depth, length=512):
    """A decoder's attention with the padding mask read at every score, as the models hand it over."""
    q, k, v = qkv(heads, kv_heads, length, depth)
    mask = torch.where(torch.ones(length, length, dtype=torch.bool).tril(), 0.0, -65504.0).to(torch.bfloat16)
    return lamina.compile(masked_attention, (q, k, v, mask), target="sm_90")


def chosen_queries(compiled) -> list[str]:
    return [dict(t.knobs)["chosen"].split(" x ")[0] for t in compiled.compilation.tiles if t.schedule == "attention"]


def test_the_cost_model_fuses_where_the_blocks_fill_the_gpu():
    """At 512 positions, 32 heads make 128 blocks of 128 queries, about one per SM: one kernel
    beats three. 12 heads fill the SMs with blocks of 64 queries, each alone on its SM (BERT's
    layer: 13.4 us fused, 3.0 more for its values' copy, against 23.8 in three kernels). With 4
    heads most SMs would idle while each block walks every key block: the three kernels stay."""
    assert chosen_queries(_decoder_layer_attention(32, 4, 64)) == ["128 queries"]
    assert chosen_queries(_decoder_layer_attention(12, 12, 64)) == ["64 queries"]
    assert "attention" not in schedules(_decoder_layer_attention(4, 4, 64))


def test_keys_that_lie_along_the_keys_keep_the_three_kernels_and_match_eager():
    """``softmax(x @ w) @ w.T``: the keys are the columns of ``w``, which lies along them (N-major);
    the attention kernel reads keys K-major, so the three kernels stay (it read them as if K-major,
    and gave a wrong answer)."""
    torch.manual_seed(0)
    x, w = torch.randn(80, 64, dtype=torch.bfloat16), torch.randn(64, 64, dtype=torch.bfloat16) * 0.1

    def program(x, w):
        return torch.softmax((x @ w).float(), -1).to(x.dtype) @ w.T

    compiled = lamina.compile(program, (x, w), target="sm_90")
    assert "attention" not in schedules(compiled)
    reference = program(x.double(), w.double())
    assert relative_error(compiled(x, w), reference) <= 1.25 * relative_error(program(x, w), reference) + 1e-3


def test_fewer_than_64_queries_keep_the_three_kernels():
    """A wgmma computes 64 query rows: fewer (a decoding step) stay with the products and the softmax."""
    q, k, v = qkv(2, 2, 33, 64)
    compiled = lamina.compile(attention, (q, k, v), target="sm_90")
    assert "attention" not in schedules(compiled)


def test_float32_and_other_targets_keep_the_three_kernels():
    q, k, v = qkv(2, 2, 64, 64, dtype=torch.float32)
    assert "attention" not in schedules(lamina.compile(attention, (q, k, v), target="sm_90"))
    q, k, v = qkv(2, 2, 64, 64)
    assert "attention" not in schedules(lamina.compile(attention, (q, k, v), target="sm_80"))


def test_the_loop_ir_and_tile_ir_read_as_written():
    q, k, v = qkv(4, 2, 128, 64)
    compiled = lamina.compile(causal_attention, (q, k, v), target="sm_90")
    loop = compiled.ir("loop")
    assert "\n".join(line for line in loop.splitlines() if "for " in line or "acc0 =" in line or "acc2 +=" in line) \
        == GOLDEN_LOOP
    tile = compiled.ir("tile")
    attention_tile = tile[tile.index("tile scaled_dot_product_attention  schedule=attention"):]
    assert attention_tile.strip() == GOLDEN_TILE.strip()


GOLDEN_LOOP = """\
    for i1 in parallel(4):
      for i2 in parallel(128):
        for r0 in reduce(128):
          for r1 in reduce(64):
          acc0 = max(acc0, where(r0 <= i2, where(r0 <= i2, acc1 * 0.125, -inf), -inf))
        for r2 in reduce(128):
          for r3 in reduce(64):
          acc2 += exp(where(r2 <= i2, where(r2 <= i2, acc3 * 0.125, -inf), -inf) - acc0)
        for i3 in serial(64):
          for r4 in reduce(128):
            for r5 in reduce(64):"""

GOLDEN_TILE = """\
tile scaled_dot_product_attention  schedule=attention
  grid (2, 4, 1) blocks of 128 threads, 73776 B shared
  parallel i2 (128): block.x tile 64 = thread.x 32 x 2 per thread (strided by 32)
  parallel i1 (4): block.y tile 1 = thread.y 1 x 1 per thread (contiguous)
  reduce r0 (128): serial, step 128, one pass: online softmax (running maximum and sum, earlier sums rescaled)
  shared q[0, i1, i2, r1] as bf16[i2 64][r1 64, 128-byte swizzle], 1 buffer, copy tma 8192 B
  shared k[0, i1 // 2, r0, r1] as bf16[r0 128][r1 64, 128-byte swizzle], 2 buffers, copy tma 16384 B
  shared v[0, i1 // 2, r4, i3] as bf16[r4 128][i3 64, 128-byte swizzle], 2 buffers, copy tma 16384 B
  copies: thread 0 issues the TMA loads of the queries once and of each key block's keys and values into a ring of 2 stages, each with a full and an empty mbarrier, refilled by thread 0 once every warpgroup has released it
  products on tensor cores: 1 consumer warpgroup of 64 query rows; per key block, wgmma m64n128k16 on bf16 gives the scores, the probabilities stay in registers in bf16 as the A of wgmma m64n64k16, which adds them times the values (staged as they lie, along the features, and transposed by the wgmma); f32 accumulators
  overlap: each key block's scores are issued before the values' product of the block before, whose wgmma runs while the warpgroup computes the softmax
  causal: key blocks past the block's last visible key are skipped
  mask by key block: r0 <= i2 settled per key block: where it holds each score reads nothing; compared at each score only where the diagonal crosses the block
  chosen = 64 queries x 128 keys, 2 stages; cheapest of 16 settings, pinned: none
  estimate = 3.2 us
"""


def test_a_planted_fault_in_the_rescaling_is_caught(monkeypatch):
    """Without rescaling the output accumulators when the running maximum rises, the sums of
    earlier key blocks count at the wrong scale: the numbers check catches it."""
    monkeypatch.setattr(attention_writer.AttentionWriter, "_rescaled_output", lambda self: [])
    torch.manual_seed(15)
    q, k, v = qkv(2, 2, 192, 64)
    k[:, :, 64:] *= 3  # later key blocks raise the maximum
    compiled = lamina.compile(attention, (q, k, v), target="sm_90", knobs={"attention": {"block_keys": 64}})
    reference = float64_reference(attention, (q, k, v))
    assert relative_error(compiled(q, k, v), reference) > 10 * relative_error(attention(q, k, v), reference)


def test_a_stage_refilled_before_its_values_product_is_done_is_a_race_the_simulator_reports(monkeypatch):
    """The stage of key block ``kb - 1`` released (and refilled by the TMA) before the wait that
    completes that block's values' product: the copy overwrites what the wgmma still reads."""
    original = attention_writer.AttentionWriter._key_block

    def released_early(self):
        body = original(self)
        wait = body.index(kernel_ir.WgmmaWait(0))
        arrive = next(i for i, s in enumerate(body) if isinstance(s, kernel_ir.MbarrierArrive))
        refill = body[-1]
        return body[:wait] + [body[arrive], refill] + [s for s in body[wait:-1] if s is not body[arrive]]

    monkeypatch.setattr(attention_writer.AttentionWriter, "_key_block", released_early)
    torch.manual_seed(18)
    q, k, v = qkv(2, 2, 384, 64)
    compiled = lamina.compile(attention, (q, k, v), target="sm_90",
                              knobs={"attention": {"block_queries": 64, "block_keys": 64, "stages": 2}})
    with pytest.raises(SimulationError, match="while `wgmma m64n64k16 bf16 .* v_tile"):
        compiled(q, k, v)


def test_a_query_that_sees_no_key_gets_zeros_as_in_pytorch():
    torch.manual_seed(17)
    q, k, v = qkv(4, 2, 100, 64)
    keep = torch.rand(1, 1, 100, 100) > 0.3
    keep[:, :, :7] = False  # the first seven queries see no key
    compiled = check(masked_attention, (q, k, v, keep), PINNED)
    out = compiled(q, k, v, keep)
    assert torch.equal(out[:, :, :7], torch.zeros_like(out[:, :, :7]))
    assert torch.equal(masked_attention(q, k, v, keep)[:, :, :7], out[:, :, :7])


@pytest.mark.parametrize("heads, kv_heads, depth, length, knobs", [
    (32, 4, 64, 512, {}),                                   # TinyLlama
    (28, 4, 128, 2048, {}),                                 # Qwen2.5-7B
    (28, 4, 128, 2048, {"block_queries": 64, "block_keys": 64}),
    (8, 1, 256, 512, {}),                                   # Gemma-2B
    (8, 1, 256, 512, {"block_queries": 128}),
    (32, 4, 64, 2048, {"warpgroups": "ping_pong", "stages": 4}),
    (28, 4, 128, 2048, {"warpgroups": "ping_pong", "stages": 3}),
])
def test_compiles_for_sm_90a_without_spills(heads, kv_heads, depth, length, knobs):
    q, k, v = (torch.randn(1, h, length, depth, dtype=torch.bfloat16) for h in (heads, kv_heads, kv_heads))
    compiled = lamina.compile(causal_attention, (q, k, v), target="sm_90", knobs={"attention": knobs})
    (kernel,) = [kern for kern, tile in zip(compiled.compilation.kernels.kernels, compiled.compilation.tiles)
                 if tile.schedule == "attention"]
    built = start_compiling(kernel, "sm_90a").result()
    assert built.registers > 0 and (built.spill_stores, built.spill_loads) == (0, 0)


@pytest.mark.gpu
@pytest.mark.parametrize("fn", [attention, causal_attention], ids=["full", "causal"])
@pytest.mark.parametrize("heads, kv_heads, depth, length", [(32, 4, 64, 512), (28, 4, 128, 2048), (12, 12, 64, 1500),
                                                            (8, 1, 256, 2048)])
@pytest.mark.parametrize("knobs", [{}, PING_PONG], ids=["chosen", "ping_pong"])
def test_matches_eager_on_the_gpu(fn, heads, kv_heads, depth, length, knobs):
    torch.manual_seed(16)
    q, k, v = (torch.randn(1, h, length, depth, dtype=torch.bfloat16, device="cuda")
               for h in (heads, kv_heads, kv_heads))
    compiled = lamina.compile(fn, (q, k, v), knobs={"attention": knobs})
    assert "attention" in schedules(compiled)
    reference = float64_reference(fn, (q, k, v))
    assert relative_error(compiled(q, k, v), reference) <= 1.25 * relative_error(fn(q, k, v), reference) + SLACK

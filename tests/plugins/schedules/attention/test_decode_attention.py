"""Attention of a few queries against many keys (decoding): the fusion into one kernel, its
split over the keys and the last block's combining, its products on the CUDA cores and on the
tensor cores, run by the simulator and checked against float64; compiled by NVRTC without
spills; run on the GPU."""

import math

import pytest
import torch

import lamina
from lamina.bench.measure import float64_reference, relative_error
from lamina.plugins.schedules.attention.decode import tensor_cores

from ..nvrtc_in_background import start_compiling

from .test_attention import SLACK, attention, causal_attention, masked_attention, schedules


def decode_inputs(heads, kv_heads, queries, keys, depth, dtype=torch.bfloat16, batch=1, device="cpu"):
    return (torch.randn(batch, heads, queries, depth, dtype=dtype, device=device),
            torch.randn(batch, kv_heads, keys, depth, dtype=dtype, device=device),
            torch.randn(batch, kv_heads, keys, depth, dtype=dtype, device=device))


def check(fn, args, knobs=None):
    compiled = lamina.compile(fn, args, target="sm_90", knobs=knobs or {})
    assert schedules(compiled) == ["attention_decode"], schedules(compiled)
    reference = float64_reference(fn, args)
    assert relative_error(compiled(*args), reference) <= 1.25 * relative_error(fn(*args), reference) + SLACK
    return compiled


PRODUCTS = ["cuda_cores", "tensor_cores"]


@pytest.mark.parametrize("products", PRODUCTS)
@pytest.mark.parametrize("fn", [attention, causal_attention], ids=["full", "causal"])
@pytest.mark.parametrize("heads, kv_heads, queries, keys, depth", [
    (2, 2, 1, 3, 64),       # three keys
    (2, 1, 1, 7, 64),       # two heads per key-value head, fewer keys than a block
    (7, 1, 1, 33, 80),      # seven heads per key-value head, 80 features
    (4, 2, 2, 130, 64),     # two queries: each group holds 2 heads x 2 queries
    (2, 2, 1, 700, 128),    # several key ranges, the last ragged
])
def test_matches_float64_on_the_simulator(fn, heads, kv_heads, queries, keys, depth, products):
    torch.manual_seed(heads * keys + depth)
    check(fn, decode_inputs(heads, kv_heads, queries, keys, depth), {"attention_decode": {"products": products}})


def test_a_planted_fault_in_the_tensor_cores_rescaling_is_caught(monkeypatch):
    """Without rescaling the output accumulators when a later tile raises the running maximum, the
    sums of the earlier tiles count at the wrong scale: the numbers check catches it."""
    monkeypatch.setattr(tensor_cores.TensorCorePhases, "_rescaled", lambda self, places: [])
    torch.manual_seed(16)
    q, k, v = decode_inputs(8, 1, 1, 256, 64)
    k[:, :, 128:] *= 3  # the later tiles raise the maximum
    compiled = lamina.compile(attention, (q, k, v), target="sm_90", knobs={"attention_decode": {
        "products": "tensor_cores", "keys_per_block": 256, "keys_per_tile": 64, "stages": 2}})
    reference = float64_reference(attention, (q, k, v))
    assert relative_error(compiled(q, k, v), reference) > 10 * relative_error(attention(q, k, v), reference)


@pytest.mark.parametrize("products", PRODUCTS)
def test_float16_and_a_batch_of_two(products):
    torch.manual_seed(3)
    check(attention, decode_inputs(4, 2, 1, 300, 64, dtype=torch.float16, batch=2),
          {"attention_decode": {"products": products}})


def test_sixteen_query_heads_to_a_key_value_head_and_256_features_fill_the_tensor_cores_rows():
    torch.manual_seed(9)
    compiled = check(attention, decode_inputs(16, 1, 1, 200, 256), {"attention_decode": {"products": "tensor_cores"}})
    assert "16 per block, reading the same keys and values, padded to the 16 rows of mma.sync" in compiled.ir("tile")


def test_the_tensor_cores_take_only_what_they_multiply_exactly():
    """float32 keys and values (or probabilities not rounded to 16 bits) stay on the CUDA cores:
    left to the cost model, the tensor cores are never chosen; pinned, no setting of the schedule
    runs the attention, which is left to the other schedules, with a warning that the pin did nothing."""
    args = decode_inputs(32, 4, 1, 300, 64, dtype=torch.float32)
    with pytest.warns(UserWarning, match="no kernel of this program was scheduled by attention_decode"):
        pinned = lamina.compile(attention, args, target="sm_90",
                                knobs={"attention_decode": {"products": "tensor_cores"}})
    assert "attention_decode" not in schedules(pinned)
    assert "products on the cuda cores" in lamina.compile(attention, args, target="sm_90").ir("tile")


@pytest.mark.parametrize("kind", ["boolean", "additive"])
def test_masks_hide_keys_in_some_ranges_and_all_of_others(kind):
    """A padding mask that hides a whole key range (its maximum -inf) and parts of others."""
    torch.manual_seed(4)
    q, k, v = decode_inputs(4, 2, 1, 400, 64, batch=2)
    keep = torch.rand(2, 1, 1, 400) > 0.3
    keep[0, :, :, 128:256] = False
    mask = keep if kind == "boolean" else torch.where(keep, 0.0, -math.inf).to(torch.bfloat16)
    check(masked_attention, (q, k, v, mask), {"attention_decode": {"keys_per_block": 128, "keys_per_tile": 64, "stages": 2}})


@pytest.mark.parametrize("keys_per_block", [64, 512])
def test_a_row_that_sees_no_key_gets_zeros_as_in_pytorch(keys_per_block):
    """PyTorch's kernels and its math path give a query that the mask hides every key from
    zeros; one range or several, the kernel does too."""
    torch.manual_seed(5)
    q, k, v = decode_inputs(2, 1, 1, 300, 64)
    keep = torch.rand(1, 2, 1, 300) > 0.5
    keep[:, 1] = False
    compiled = lamina.compile(masked_attention, (q, k, v, keep), target="sm_90",
                              knobs={"attention_decode": {"keys_per_block": keys_per_block}})
    assert schedules(compiled) == ["attention_decode"]
    out = compiled(q, k, v, keep)
    expected = masked_attention(q, k, v, keep)
    assert torch.equal(out[:, 1], torch.zeros_like(out[:, 1])) and torch.equal(expected[:, 1], out[:, 1])
    assert relative_error(out, float64_reference(masked_attention, (q, k, v, keep))) <= 2 * relative_error(
        expected, float64_reference(masked_attention, (q, k, v, keep))) + SLACK


@pytest.mark.parametrize("products", PRODUCTS)
def test_more_key_ranges_than_a_warp_has_lanes_are_combined(products):
    """41 ranges (the last ragged) for 5 rows of a group: the last block's warps read the ranges'
    maxima and sums a lane a range, 32 at a time, the second round of reads only partly."""
    torch.manual_seed(41)
    q, k, v = decode_inputs(5, 1, 1, 64 * 40 + 17, 64)
    k[:, :, 1000:1100] *= 3  # some ranges' maxima above the others
    compiled = check(attention, (q, k, v), {"attention_decode": {"products": products, "keys_per_block": 64}})
    assert "41 key ranges" in compiled.ir("tile")


@pytest.mark.parametrize("keys_per_block, keys_per_tile, stages", [
    (64, 64, 2), (256, 64, 2), (256, 64, 4), (512, 128, 3), (1024, 128, 2)])
def test_pinned_knobs_run_and_show_in_the_tile_ir(keys_per_block, keys_per_tile, stages):
    """One tile per range, several tiles per range (the online softmax across them) in rings of
    two to four stages, one range for all the keys."""
    torch.manual_seed(6)
    knobs = {"attention_decode": {"keys_per_block": keys_per_block, "keys_per_tile": keys_per_tile, "stages": stages}}
    compiled = check(attention, decode_inputs(8, 1, 1, 520, 64), knobs)
    ranges = math.ceil(520 / keys_per_block)
    tile = compiled.ir("tile")
    assert f"{keys_per_block} keys per block in tiles of {keys_per_tile}, {stages} stages, {ranges} key range" in tile
    assert ("the last block of a row group to finish combines them" in tile) == (ranges > 1)


def test_the_tile_ir_of_a_decoding_step():
    q, k, v = decode_inputs(32, 4, 1, 4096, 64)
    tile = lamina.compile(attention, (q, k, v), target="sm_90").ir("tile")
    assert "schedule=attention_decode" in tile
    assert "block.x tile 8" in tile  # the eight query heads that share a key-value head
    assert "shared k[0, i1 // 8, r0, r1] as bf16[r0 128][r1 64 + pad 8], 2 buffers, copy cp.async 16 B" in tile
    assert "padded to the 16 rows of mma.sync m16n8k16 on the tensor cores" in tile


def test_many_queries_are_left_to_the_other_schedules():
    q, k, v = decode_inputs(2, 2, 64, 64, 64)
    assert "attention_decode" not in schedules(lamina.compile(attention, (q, k, v), target="sm_90"))


@pytest.mark.parametrize("products", PRODUCTS)
@pytest.mark.parametrize("heads, kv_heads, depth, keys", [(32, 4, 64, 4096), (28, 4, 128, 32768), (16, 16, 80, 512),
                                                          (8, 1, 256, 4096)])
def test_compiles_for_sm_90a_without_spills(heads, kv_heads, depth, keys, products):
    q, k, v = decode_inputs(heads, kv_heads, 1, keys, depth)
    compiled = lamina.compile(attention, (q, k, v), target="sm_90", knobs={"attention_decode": {"products": products}})
    (kernel,) = compiled.compilation.kernels.kernels
    built = start_compiling(kernel, "sm_90a").result()
    assert built.registers > 0 and (built.spill_stores, built.spill_loads) == (0, 0)


@pytest.mark.gpu
@pytest.mark.parametrize("products", PRODUCTS)
@pytest.mark.parametrize("fn", [attention, causal_attention], ids=["full", "causal"])
@pytest.mark.parametrize("heads, kv_heads, depth, keys", [(32, 4, 64, 4096), (28, 4, 128, 32768), (12, 12, 64, 700),
                                                          (8, 1, 256, 4096)])
def test_matches_eager_on_the_gpu(fn, heads, kv_heads, depth, keys, products):
    torch.manual_seed(7)
    args = decode_inputs(heads, kv_heads, 1, keys, depth, device="cuda")
    compiled = lamina.compile(fn, args, knobs={"attention_decode": {"products": products}})
    assert schedules(compiled) == ["attention_decode"]
    reference = float64_reference(fn, args)
    assert relative_error(compiled(*args), reference) <= 1.25 * relative_error(fn(*args), reference) + SLACK


def compiled_for_every_length(fn, args, **settings):
    """``fn`` compiled once for every length of the keys and values (a cache that grows)."""
    keys = torch.export.Dim("keys", min=1, max=32768)
    dynamic = (None, {2: keys}, {2: keys}) + (None,) * (len(args) - 3)
    return lamina.compile(fn, args, target="sm_90", dynamic_shapes=dynamic, **settings)


@pytest.mark.parametrize("fn", [attention, causal_attention], ids=["full", "causal"])
@pytest.mark.parametrize("example, weighed_at", [(130, 2048), (3000, 3000)])
def test_a_cache_whose_length_is_known_only_at_run_time_takes_one_kernel_at_every_length(fn, example, weighed_at):
    """The key ranges are a number chosen at the example's length (at least ``GROWING_CACHE_KEYS``:
    the example is the shortest a growing cache will be), their tiles counted at each call: a
    shorter cache leaves ranges empty, a longer one gives each range more tiles."""
    torch.manual_seed(example)
    compiled = compiled_for_every_length(fn, decode_inputs(4, 2, 1, example, 64))
    assert schedules(compiled) == ["attention_decode"]
    tile = compiled.ir("tile")
    assert f"weighed at s0 = {weighed_at} keys, the ranges' tiles counted at run time" in tile
    assert "key tiles: (s0 + " in tile
    for keys in (1, 3, 700, 2000):
        args = decode_inputs(4, 2, 1, keys, 64)
        reference = float64_reference(fn, args)
        assert relative_error(compiled(*args), reference) <= 1.25 * relative_error(fn(*args), reference) + SLACK
    assert len(compiled.specializations) == 1


def test_a_cache_of_any_length_compiles_for_sm_90a_taking_its_length_by_value():
    compiled = compiled_for_every_length(attention, decode_inputs(32, 4, 1, 300, 64))
    (kernel,) = compiled.compilation.kernels.kernels
    assert kernel.sizes == ("s0",)
    built = start_compiling(kernel, "sm_90a").result()
    assert built.registers > 0 and (built.spill_stores, built.spill_loads) == (0, 0)


@pytest.mark.gpu
def test_a_cache_of_any_length_matches_eager_on_the_gpu():
    torch.manual_seed(8)
    keys = torch.export.Dim("keys", min=1, max=32768)
    compiled = lamina.compile(attention, decode_inputs(32, 4, 1, 300, 64, device="cuda"),
                              dynamic_shapes=(None, {2: keys}, {2: keys}))
    assert schedules(compiled) == ["attention_decode"]
    for length in (1, 300, 4097, 32768):
        args = decode_inputs(32, 4, 1, length, 64, device="cuda")
        reference = float64_reference(attention, args)
        assert relative_error(compiled(*args), reference) <= 1.25 * relative_error(attention(*args), reference) + SLACK
    assert len(compiled.specializations) == 1

"""Attention under a decoder's mask as Hugging Face builds it on CUDA, in one kernel on Hopper.

The mask is ``key <= query`` and the padding mask ``attention_mask[batch, key]`` (read through
index tensors, ``aten.index.Tensor``), turned into an additive bias ``where(keep, 0, -65504)``
that every layer's attention adds to its scores. At batch 1 the padding mask's lookup reads an
axis of length 1: it is a plain read of a vector, recomputed inside each attention kernel,
never a (length x length) buffer that every layer reads at every score. Checked on the
simulator against float64, padded rows (every key hidden) included, and compiled by NVRTC for
sm_90a without spills.
"""

import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.bench.measure import float64_reference, relative_error

from ..nvrtc_in_background import start_compiling

SLACK = 1e-3
PINNED = {"attention": {"stages": 2}}
"""A pinned knob of the schedule fuses where the cost model would keep small shapes apart."""


def _rotated(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin


def _bias(attention_mask, length, dtype):
    """The additive bias of a causal and padding mask, built as Hugging Face builds the mask."""
    device = attention_mask.device
    batch, queries, keys = (torch.arange(n, device=device) for n in (1, length, length))
    b, q, k = batch[:, None, None, None], queries[None, None, :, None], keys[None, None, None, :]
    keep = ((k <= q) & attention_mask.bool()[b, k]).expand(1, -1, length, length)
    return torch.where(keep, torch.tensor(0.0, dtype=dtype, device=device), torch.tensor(-65504.0, dtype=dtype,
                                                                                        device=device))


def _attention(xq, xk, v, cos, sin, bias):
    length, kv_heads, depth = v.shape[-2], v.shape[-3], v.shape[-1]
    q = _rotated(xq.view(1, length, -1, depth).transpose(1, 2), cos, sin)
    k = _rotated(xk.view(1, length, kv_heads, depth).transpose(1, 2), cos, sin)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=True).transpose(1, 2)


def one_layer(xq, xk, v, attention_mask, cos, sin):
    return _attention(xq, xk, v, cos, sin, _bias(attention_mask, v.shape[-2], v.dtype))


def two_layers(xq, xk, v, attention_mask, cos, sin):
    """Two layers' attention reading one bias, as every layer of a model reads it."""
    bias = _bias(attention_mask, v.shape[-2], v.dtype)
    return _attention(xq, xk, v, cos, sin, bias) + _attention(xq * 0.5, xk, v, cos, sin, bias)


def inputs(heads, kv_heads, length, depth, padded):
    """Random projections and values; ``padded`` leading positions masked (left padding: their
    query rows see no key but through the bias, as in eager)."""
    xq = torch.randn(length, heads * depth, dtype=torch.bfloat16)
    xk = torch.randn(length, kv_heads * depth, dtype=torch.bfloat16)
    v = torch.randn(1, kv_heads, length, depth, dtype=torch.bfloat16)
    attention_mask = torch.ones(1, length, dtype=torch.int64)
    attention_mask[0, :padded] = 0
    frequencies = 1.0 / 10000 ** (torch.arange(0, depth, 2).float() / depth)
    angles = torch.arange(length).float()[:, None] * frequencies[None, :]
    angles = torch.cat((angles, angles), -1)
    return xq, xk, v, attention_mask, angles.cos().to(torch.bfloat16), angles.sin().to(torch.bfloat16)


def compiled_attention(fn, args, knobs=PINNED):
    compiled = lamina.compile(fn, args, target="sm_90", knobs=knobs)
    schedules = [t.schedule for t in compiled.compilation.tiles]
    assert schedules.count("attention") == (2 if fn is two_layers else 1), schedules
    return compiled


def _square_buffers(program, length):
    """The buffers of the program with a (length x length) plane: a mask or scores in memory."""
    return [b.name for b in program.temporaries if tuple(b.type.shape[-2:]) == (length, length)]


@pytest.mark.parametrize("fn", [one_layer, two_layers], ids=["one_layer", "two_layers"])
@pytest.mark.parametrize("heads, kv_heads, length, depth, padded", [
    (4, 2, 130, 64, 5),     # ragged, the first five rows see only padding
    (4, 2, 200, 128, 0),    # several key blocks, 128 features, no padding
])
def test_matches_float64_on_the_simulator(fn, heads, kv_heads, length, depth, padded):
    torch.manual_seed(heads * length + depth + padded)
    args = inputs(heads, kv_heads, length, depth, padded)
    compiled = compiled_attention(fn, args)
    reference = float64_reference(fn, args)
    out = compiled(*args)
    assert relative_error(out, reference) <= 1.25 * relative_error(fn(*args), reference) + SLACK
    if padded:
        rows = slice(0, padded)
        assert relative_error(out[:, rows], reference[:, rows]) \
            <= 1.25 * relative_error(fn(*args)[:, rows], reference[:, rows]) + SLACK


def test_the_bias_is_recomputed_in_each_attention_kernel_from_the_padding_vector():
    """No (length x length) buffer: each attention kernel reads the (1, length) padding mask."""
    length = 130
    compiled = compiled_attention(two_layers, inputs(4, 2, length, 64, 5))
    program = compiled.compilation.loop
    assert _square_buffers(program, length) == []
    fused = [t.kernel for t in compiled.compilation.tiles if t.schedule == "attention"]
    for kernel in fused:
        assert "attention_mask" in {b.name for b in kernel.inputs}
        assert all(b.type.shape[-2:] != (length, length) for b in kernel.inputs)


def test_the_causal_comparison_is_settled_per_key_block():
    """Left of the diagonal a score reads only the padding vector, right of it nothing; the
    numbers of blocks of each kind (left, crossed, right) are checked above, at 130 and 200
    queries, two query blocks by two key blocks."""
    tile = compiled_attention(one_layer, inputs(4, 2, 200, 64, 3)).ir("tile")
    assert "mask by key block: r0 <= i1 settled per key block: where it holds each score reads attention_mask, " \
           "where it fails nothing; compared at each score only where the diagonal crosses the block" in tile


def test_a_key_block_whose_keys_are_all_shown_reads_nothing_of_the_padding():
    """The padding vector's entry is settled per key block at run time: a flag per key block says
    whether every key is shown, and there the scores read nothing of the vector."""
    tile = compiled_attention(one_layer, inputs(4, 2, 200, 64, 0)).ir("tile")
    assert "a key block where b8(attention_mask[0, r0]) holds for every key (a flag per key block, found before " \
           "the walk) reads nothing of it" in tile


@pytest.mark.parametrize("hidden", [range(150, 161), range(0, 200, 37)], ids=["a_hole_in_one_block", "one_in_each"])
def test_keys_hidden_in_some_key_blocks_match_float64(hidden):
    """Keys hidden by the padding in the second of two key blocks only, and a few in every one:
    the blocks whose flag says every key is shown and those that read the vector, side by side."""
    torch.manual_seed(7)
    args = inputs(4, 2, 200, 64, 0)
    args[3][0, list(hidden)] = 0
    compiled = compiled_attention(one_layer, args)
    reference = float64_reference(one_layer, args)
    assert relative_error(compiled(*args), reference) <= 1.25 * relative_error(one_layer(*args), reference) + SLACK


def test_a_batch_of_one_reads_its_padding_mask_without_a_lookup():
    """``attention_mask[arange(1), key]``: the batch axis has one index PyTorch accepts, read as 0."""
    length = 96
    compiled = compiled_attention(one_layer, inputs(4, 2, length, 64, 3))
    loop = compiled.ir("loop")
    assert "attention_mask[0, " in loop
    read = {b.name: b for kernel in compiled.compilation.loop.kernels for b in kernel.inputs}
    assert [name for name, b in read.items() if not b.type.dtype.is_float] == ["attention_mask"], \
        "the index tensor of the batch axis is still read"


@pytest.mark.parametrize("heads, kv_heads, depth", [(32, 4, 64), (28, 4, 128)], ids=["tinyllama", "qwen2.5"])
def test_compiles_for_sm_90a_without_spills(heads, kv_heads, depth):
    compiled = compiled_attention(two_layers, inputs(heads, kv_heads, 512, depth, 7), knobs={})
    kernels = [kern for kern, tile in zip(compiled.compilation.kernels.kernels, compiled.compilation.tiles)
               if tile.schedule == "attention"]
    for built in [start_compiling(kernel, "sm_90a") for kernel in kernels]:
        result = built.result()
        assert result.registers > 0 and (result.spill_stores, result.spill_loads) == (0, 0)


@pytest.mark.gpu
@pytest.mark.parametrize("hidden", [range(0), range(0, 7), range(300, 311)], ids=["no_padding", "left_padding",
                                                                                   "a_hole"])
def test_matches_float64_on_the_gpu(hidden):
    """TinyLlama's heads at 512 tokens, as the model runs them, the padding flags of the key blocks
    computed on the GPU."""
    torch.manual_seed(11)
    args = inputs(32, 4, 512, 64, 0)
    args[3][0, list(hidden)] = 0
    args = tuple(a.cuda() for a in args)
    compiled = lamina.compile(one_layer, args, knobs={})
    assert "attention" in [t.schedule for t in compiled.compilation.tiles]
    reference = float64_reference(one_layer, args)
    assert relative_error(compiled(*args), reference) <= 1.25 * relative_error(one_layer(*args), reference) + SLACK


def test_the_key_blocks_flags_are_counted_in_the_block_s_shared_memory():
    """The Tile IR's shared bytes, which the cost model weighs against the limit, are the kernel's."""
    compiled = compiled_attention(one_layer, inputs(32, 4, 512, 64, 0), knobs={})
    for tile, kernel in zip(compiled.compilation.tiles, compiled.compilation.kernels.kernels):
        if tile.schedule == "attention":
            assert kernel.launch.dynamic_shared_bytes == tile.shared_bytes

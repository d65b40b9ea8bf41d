"""A temporary stored with its axes in the order in which a matmul reads it K-major.

Attention written out as products (T5's, a model's eager attention) leaves its output as
(batch, heads, positions, features); the output projection sums over heads and features
together. The rule stores that output position by position, (batch, positions, heads,
features), so that the projection runs on the TMA GEMM; the simulator checks the numbers
against float64 on 70 positions, which no tile divides.
"""

import pytest
import torch

import lamina
from lamina.bench.measure import float64_reference, relative_error

TMA = "wgmma 16-bit tma"
SMALL = {"contraction": {"block_m": 64, "block_n": 64, "stages": 2, "consumer_warpgroups": 1}}
FEATURES = 64


def attention_output(x, wq, wk, wv):
    """Eager attention over ``x`` (1, positions, heads * features): (1, heads, positions, features)."""
    length, heads_count = x.shape[1], x.shape[2] // FEATURES

    def heads(w):
        return (x @ w.T).view(1, length, heads_count, FEATURES).transpose(1, 2)

    q, k, v = heads(wq), heads(wk), heads(wv)
    probabilities = torch.softmax((q @ k.transpose(-1, -2)).float(), dim=-1).to(x.dtype)
    return probabilities @ v


def attention_block(x, wq, wk, wv, wo):
    out = attention_output(x, wq, wk, wv)
    return out.transpose(1, 2).reshape(x.shape) @ wo.T


def attention_block_and_its_heads(x, wq, wk, wv, wo):
    out = attention_output(x, wq, wk, wv)
    return out.transpose(1, 2).reshape(x.shape) @ wo.T, out.float().sum(-1)


def inputs(length, seed, dtype=torch.bfloat16, heads=2):
    torch.manual_seed(seed)
    width = heads * FEATURES
    x = torch.randn(1, length, width, dtype=dtype)
    return (x, *(torch.randn(width, width, dtype=dtype) / width ** 0.5 for _ in range(4)))


def buffers(compiled) -> dict[str, str]:
    lines = [line.strip() for line in compiled.ir("loop").splitlines() if line.strip().startswith("buffer ")]
    return dict(line.removeprefix("buffer ").split(": ", 1) for line in lines)


def projection(compiled, args):
    """The tile of the output projection, the kernel that writes the program's output."""
    (tile,) = [t for t in compiled.compilation.tiles if t.kernel.outputs[0].type.shape == tuple(args[0].shape)]
    return tile


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_the_output_projection_reads_the_heads_position_by_position_on_the_tma(dtype):
    args = inputs(70, 6, dtype)
    compiled = lamina.compile(attention_block, args, target="sm_90", knobs=SMALL)
    short = "bf16" if dtype == torch.bfloat16 else "f16"
    assert f"{short}[70, 2, {FEATURES}]" in buffers(compiled).values(), buffers(compiled)
    assert projection(compiled, args).settings.products == TMA
    reference = float64_reference(attention_block, args)
    assert relative_error(compiled(*args), reference) <= 1.25 * relative_error(attention_block(*args), reference) + 1e-3


@pytest.mark.parametrize("fn, reordered", [(attention_block, True), (attention_block_and_its_heads, False)],
                         ids=["read_by_the_projection", "read_by_another_kernel_too"])
def test_the_cost_model_reorders_t5s_attention_output(fn, reordered):
    """At T5-base's size (512 positions, 12 heads) the projection on the TMA GEMM costs a fifth of
    what it costs on the CUDA cores; where another kernel reads the heads as they lie too, they
    keep their layout."""
    args = inputs(512, 7, heads=12)
    compiled = lamina.compile(fn, args, target="sm_90")
    assert (f"bf16[512, 12, {FEATURES}]" in buffers(compiled).values()) == reordered, buffers(compiled)
    assert (f"bf16[12, 512, {FEATURES}]" in buffers(compiled).values()) != reordered
    assert (getattr(projection(compiled, args).settings, "products", None) == TMA) == reordered


def test_off_hopper_the_layout_is_the_programs():
    compiled = lamina.compile(attention_block, inputs(512, 8, heads=12), target="sm_80")
    assert f"bf16[12, 512, {FEATURES}]" in buffers(compiled).values(), buffers(compiled)


@pytest.mark.gpu
def test_the_reordered_attention_block_matches_eager_on_the_gpu():
    args = tuple(a.cuda() for a in inputs(500, 9))
    compiled = lamina.compile(attention_block, args)
    reference = float64_reference(attention_block, args)
    assert relative_error(compiled(*args), reference) <= 1.25 * relative_error(attention_block(*args), reference) + 1e-3

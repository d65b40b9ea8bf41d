"""Temporaries whose rows are not 16 bytes apart, padded so that the TMA GEMM reads them.

Attention over 70 positions (a stand-in for Whisper's 1 500 frames or ViT's 197 patches) has
probabilities in rows of 140 bytes: with the TMA GEMM pinned, the rule pads their buffer's rows to
72 elements, and the values' K-major copy likewise, so both products run on it (unpinned, the cost
model pads only where that pays); the simulator checks that
no kernel reads or writes past a row's real end (the padding is never written) and the numbers
against float64.
"""

import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.bench.measure import float64_reference, relative_error

from ..contraction_kernels import THREE_KERNELS


TMA = "wgmma 16-bit tma"
SMALL = {"contraction": {"block_m": 64, "block_n": 64, "stages": 2, "consumer_warpgroups": 1}}


def attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def causal_attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def buffers(compiled) -> dict[str, str]:
    """The program's buffers by name, as the Loop IR declares them."""
    lines = [line.strip() for line in compiled.ir("loop").splitlines() if line.strip().startswith("buffer ")]
    return dict(line.removeprefix("buffer ").split(": ", 1) for line in lines)


@pytest.mark.parametrize("fn", [attention, causal_attention], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_probabilities_over_70_positions_are_padded_and_both_products_run_on_the_tma(fn, dtype):
    torch.manual_seed(3)
    q, k, v = (torch.randn(1, 2, 70, 64, dtype=dtype) for _ in range(3))
    compiled = lamina.compile(fn, (q, k, v), target="sm_90", knobs=SMALL, disable=THREE_KERNELS)
    assert [t.settings.products for t in compiled.compilation.tiles if t.schedule == "contraction"] == [TMA, TMA]
    padded = {name: shape for name, shape in buffers(compiled).items() if shape.endswith(", 72]")}
    short = "bf16" if dtype == torch.bfloat16 else "f16"
    assert sorted(padded.values()) == [f"{short}[1, 2, 70, 72]", f"{short}[2, 64, 72]"], buffers(compiled)
    reference = float64_reference(fn, (q, k, v))
    assert relative_error(compiled(q, k, v), reference) <= 1.25 * relative_error(fn(q, k, v), reference) + 1e-3


def test_an_input_with_unaligned_rows_is_not_padded_and_its_product_still_runs():
    """The program's own inputs lie as the caller gives them: the product over 70-element rows of
    an input runs on the CUDA cores."""
    torch.manual_seed(4)
    p, v = torch.randn(80, 70, dtype=torch.bfloat16), torch.randn(64, 70, dtype=torch.bfloat16)
    compiled = lamina.compile(lambda p, v: p @ v.T, (p, v), target="sm_90")
    assert not any(shape.endswith(", 72]") for shape in buffers(compiled).values())
    assert [t.settings.products for t in compiled.compilation.tiles if t.schedule == "contraction"] != [TMA]
    reference = float64_reference(lambda p, v: p @ v.T, (p, v))
    assert relative_error(compiled(p, v), reference) <= 1.25 * relative_error(p @ v.T, reference) + 1e-3


@pytest.mark.parametrize("length, padded", [(1500, True), (197, False)])
def test_the_cost_model_pads_where_the_tma_gemm_pays_for_the_copy(length, padded):
    """Over Whisper's 1 500 frames the TMA GEMM saves several times what padding and the values'
    K-major copy cost; over ViT's 197 patches the copy costs about what it saves, and the product
    stays on the CUDA cores."""
    q, k, v = (torch.randn(1, 12, length, 64, dtype=torch.bfloat16) for _ in range(3))
    compiled = lamina.compile(attention, (q, k, v), target="sm_90", disable=THREE_KERNELS)
    products = [t.settings.products for t in compiled.compilation.tiles if t.schedule == "contraction"]
    assert (products == [TMA, TMA]) == padded, products
    assert any(shape.endswith(f", {length + 4}]") for shape in buffers(compiled).values()) == padded


@pytest.mark.gpu
@pytest.mark.parametrize("heads, length", [(12, 1500), (12, 197)])
def test_attention_over_unaligned_lengths_matches_eager_on_the_gpu(heads, length):
    torch.manual_seed(5)
    q, k, v = (torch.randn(1, heads, length, 64, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    compiled = lamina.compile(attention, (q, k, v))
    reference = float64_reference(attention, (q, k, v))
    assert relative_error(compiled(q, k, v), reference) <= 1.25 * relative_error(attention(q, k, v), reference) + 1e-3

"""16-bit products on wgmma with operands the block's threads stage: where the TMA cannot read one.

A convolution reads its image through a window, zero past the edges: the TMA cannot copy that
operand, so its products ran on the CUDA cores. With ``products = wgmma`` on bf16 or fp16 the
threads stage both operands K-major in the 128-byte swizzle (the window element by element,
zeros where it overhangs; a contiguous weight 16 bytes at a time) and wgmma m64nNk16 multiplies
them. The simulator checks the numbers against float64 on shapes no tile divides.
"""

import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.bench.measure import float64_reference, relative_error

STAGED, TMA = "wgmma 16-bit", "wgmma 16-bit tma"
PINNED = {"contraction": {"products": "wgmma"}}


def convolution(x, w):
    return F.conv2d(x, w, padding=1)


def products(compiled) -> list[str | None]:
    return [getattr(t.settings, "products", None) for t in compiled.compilation.tiles if t.schedule == "contraction"]


def close_to_eager(compiled, fn, args):
    reference = float64_reference(fn, args)
    return relative_error(compiled(*args), reference) <= 1.25 * relative_error(fn(*args), reference) + 1e-3


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_a_padded_convolution_runs_on_wgmma_and_matches_eager(dtype):
    torch.manual_seed(11)
    args = (torch.randn(1, 8, 13, 11, dtype=dtype), torch.randn(72, 8, 3, 3, dtype=dtype))
    compiled = lamina.compile(convolution, args, target="sm_90", knobs=PINNED)
    assert products(compiled) == [STAGED]
    tile = compiled.ir("tile")
    assert "copy load_store 2 B" in tile and "copy cp.async 16 B" in tile, tile
    assert close_to_eager(compiled, convolution, args)


def test_a_ragged_matmul_pinned_to_staged_wgmma_matches_eager():
    torch.manual_seed(12)
    args = (torch.randn(70, 100, dtype=torch.bfloat16), torch.randn(100, 72, dtype=torch.bfloat16))
    compiled = lamina.compile(torch.matmul, args, target="sm_90", knobs=PINNED)
    assert products(compiled) == [STAGED]
    assert close_to_eager(compiled, torch.matmul, args)


def strided_convolution(x, w):
    return F.conv1d(x, w, padding=1, stride=2)


def test_split_k_slices_of_a_strided_convolution_on_staged_wgmma_match_eager():
    """Whisper's second convolution: stride 2 over an input padded with zeros, split across blocks
    into three slices of 128 (whole k-tiles) and a combine."""
    torch.manual_seed(14)
    args = (torch.randn(1, 128, 41, dtype=torch.bfloat16), torch.randn(70, 128, 3, dtype=torch.bfloat16))
    compiled = lamina.compile(strided_convolution, args, target="sm_90",
                              knobs={"contraction": {"products": "wgmma", "split_k": 3}})
    assert products(compiled) == [STAGED]
    assert close_to_eager(compiled, strided_convolution, args)


def test_the_cost_model_puts_a_cnns_convolution_on_wgmma():
    args = (torch.randn(1, 64, 56, 56, dtype=torch.bfloat16), torch.randn(128, 64, 3, 3, dtype=torch.bfloat16))
    assert products(lamina.compile(convolution, args, target="sm_90")) == [STAGED]


def test_a_product_the_tma_reads_stays_on_the_tma_gemm():
    args = (torch.randn(512, 1024, dtype=torch.bfloat16), torch.randn(1024, 1024, dtype=torch.bfloat16))
    assert products(lamina.compile(lambda x, w: x @ w.T, args, target="sm_90")) == [TMA]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 64, 56, 56, 128), (2, 3, 50, 37, 64)], ids=["cnn", "ragged_rgb"])
def test_convolutions_on_staged_wgmma_match_eager_on_the_gpu(shape):
    batch, inside, height, width, outside = shape
    torch.manual_seed(13)
    args = (torch.randn(batch, inside, height, width, dtype=torch.bfloat16, device="cuda"),
            torch.randn(outside, inside, 3, 3, dtype=torch.bfloat16, device="cuda"))
    compiled = lamina.compile(convolution, args, knobs=PINNED)
    assert products(compiled) == [STAGED]
    assert close_to_eager(compiled, convolution, args)

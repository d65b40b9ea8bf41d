"""A temporary whose every value is widened from bf16 is stored in bf16, so a matmul reading it
has two 16-bit operands."""

import torch
import torch.nn.functional as F

import lamina
from lamina.core.ir import dtypes


def rotated_attention(q, k, v, cos, sin):
    """Llama's attention: the query and key rotated in bf16, then scaled dot-product attention."""
    def rotate(x):
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin
    return F.scaled_dot_product_attention(rotate(q), rotate(k), v, is_causal=True)


def attention_inputs(length=37, head=40, heads=3):
    torch.manual_seed(0)
    shapes = [(1, heads, length, head)] * 3 + [(length, head)] * 2
    return tuple(torch.randn(s).to(torch.bfloat16) for s in shapes)


def test_a_temporary_stored_widened_from_bf16_is_stored_as_bf16():
    """Attention's query holds bf16 values widened to float32: stored in bf16, its product's
    operands are both 16-bit."""
    compiled = lamina.compile(rotated_attention, attention_inputs())
    widened = [b for b in compiled.compilation.loop.temporaries if b.name.endswith("_query")]
    assert widened and all(b.type.dtype == dtypes.bfloat16 for b in widened)


def rotated_scores(q, k, cos, sin):
    """Attention's scores of a query and key rotated in bf16 and widened for their product."""
    def rotate(x):
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin
    return rotate(q).float() @ rotate(k).float().transpose(-1, -2)


def test_scores_of_widened_bf16_operands_run_on_the_tensor_cores_and_match_eager():
    """Both operands stored in bf16, the product is the TMA GEMM's (simulated here, at a length and
    head size no tile divides), and the scores are eager's: the widening was exact."""
    q, k, _, cos, sin = attention_inputs()
    compiled = lamina.compile(rotated_scores, (q, k, cos, sin), target="sm_90",
                              knobs={"contraction.products": "wgmma_tma"})
    assert [b.type.dtype for b in compiled.compilation.loop.temporaries] == [dtypes.bfloat16] * 2
    expected = rotated_scores(q, k, cos, sin)
    torch.testing.assert_close(compiled(q, k, cos, sin), expected, rtol=1e-5, atol=1e-5)


def whisper_front(features, w1, w2):
    """Whisper's two convolutions: the second reads the first's GELU, widened from bf16, through a
    window padded with zeros."""
    hidden = F.gelu(F.conv1d(features, w1, padding=1))
    return F.gelu(F.conv1d(hidden, w2, padding=1, stride=2))


def test_an_input_padded_with_zeros_is_stored_in_bf16_and_convolved_on_wgmma():
    """Zero is exact in bf16: the GELU stored, padded, for the second convolution (Whisper-small's:
    80 mel bins, 3 000 frames, 768 channels) is stored in bf16, so both of that convolution's
    operands are 16-bit and its products run on wgmma."""
    args = (torch.randn(1, 80, 3000, dtype=torch.bfloat16), torch.randn(768, 80, 3, dtype=torch.bfloat16),
            torch.randn(768, 768, 3, dtype=torch.bfloat16))
    compiled = lamina.compile(whisper_front, args, target="sm_90")
    padded = [b for b in compiled.compilation.loop.temporaries if b.name.endswith("_pad")]
    assert padded and all(b.type.dtype == dtypes.bfloat16 for b in padded), compiled.compilation.loop.temporaries
    assert all(t.settings.products == "wgmma 16-bit" for t in compiled.compilation.tiles
               if t.schedule == "contraction"), compiled.ir("tile")

"""K-major copies of 16-bit operands for the TMA GEMM (``wgmma_tma.k_major_operands``)."""

import torch
import torch.nn.functional as F

import lamina
from lamina.bench.measure import relative_error

from ..contraction_kernels import THREE_KERNELS


TMA = "wgmma 16-bit tma"
SMALL = {"contraction": {"products": "wgmma_tma", "block_m": 64, "block_n": 64, "stages": 2,
                         "consumer_warpgroups": 1}}


def repeated(kv: torch.Tensor, group: int) -> torch.Tensor:
    """Hugging Face's ``repeat_kv``: each key-value head repeated for the query heads that share it."""
    batch, heads, length, size = kv.shape
    return kv[:, :, None].expand(batch, heads, group, length, size).reshape(batch, heads * group, length, size)


def grouped_attention(q, k, v):
    return F.scaled_dot_product_attention(q, repeated(k, 3), repeated(v, 3), is_causal=True)


def test_grouped_values_are_copied_once_per_key_value_head():
    """Six query heads share two key-value heads: the copy holds two heads, the positions last,
    and the second product reads head ``h // 3`` of it through the tensor map."""
    torch.manual_seed(21)
    q = torch.randn(1, 6, 80, 64, dtype=torch.bfloat16)
    k, v = (torch.randn(1, 2, 80, 64, dtype=torch.bfloat16) for _ in range(2))
    compiled = lamina.compile(grouped_attention, (q, k, v), target="sm_90", knobs=SMALL,
                              disable=THREE_KERNELS)
    assert "buffer v_k_major: bf16[2, 64, 80]" in compiled.ir("loop")
    assert [t.settings.products for t in compiled.compilation.tiles if t.schedule == "contraction"] == [TMA, TMA]
    assert ("v_k_major", "transpose") in [(t.kernel.name, t.schedule) for t in compiled.compilation.tiles]
    expected = grouped_attention(*(t.double() for t in (q, k, v)))
    assert relative_error(compiled(q, k, v), expected) <= 1.25 * relative_error(grouped_attention(q, k, v), expected)

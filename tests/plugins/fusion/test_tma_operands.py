"""Matmul operands in memory as the TMA copies them: on Hopper a 16-bit operand computed by a
pointwise kernel (a normalisation before a projection) is stored, elsewhere it stays in the
operand; attention's output is stored position by position, so that the projection after it
reads rows."""

import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.bench.measure import float64_reference, relative_error
from lamina.core.ir import loop_ir

TMA = "wgmma 16-bit tma"


def normalised_projection(x, g, w):
    """RMSNorm's scaling (its mean as an input) and a projection of the bf16 result, as Llama's layers do."""
    return F.linear((x.float() * torch.rsqrt(g.float())).to(x.dtype) * 1.5, w)


def inputs(rows, dtype=torch.bfloat16):
    torch.manual_seed(0)
    return (torch.randn(rows, 72, dtype=dtype), torch.rand(rows, 1, dtype=dtype) + 0.5,
            torch.randn(136, 72, dtype=dtype) / 72 ** 0.5)


def products(compiled):
    return [t.settings.products if t.settings else None for t in compiled.compilation.tiles if t.schedule == "contraction"]


def test_the_normalised_operand_is_stored_and_the_projection_runs_on_the_tma_gemm():
    """Compiled only: at this size the cost model prefers the TMA GEMM (the simulator would be slow)."""
    torch.manual_seed(0)
    args = (torch.randn(512, 1024, dtype=torch.bfloat16), torch.rand(512, 1, dtype=torch.bfloat16) + 0.5,
            torch.randn(2048, 1024, dtype=torch.bfloat16))
    compiled = lamina.compile(normalised_projection, args)
    first, second = compiled.compilation.loop.kernels
    assert "rsqrt" in loop_ir.format_kernel(first) and "rsqrt" not in loop_ir.format_kernel(second)
    assert products(compiled) == [TMA]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_stored_operand_gives_eager_s_numbers_on_ragged_shapes(dtype):
    args = inputs(130, dtype)
    compiled = lamina.compile(normalised_projection, args, knobs={"contraction": {"products": "wgmma_tma"}})
    assert compiled.kernel_count == 2 and products(compiled) == [TMA]
    reference = float64_reference(normalised_projection, args)
    eager = normalised_projection(*args)
    assert relative_error(compiled(*args), reference) < 1.5 * relative_error(eager, reference) + 1e-4


@pytest.mark.parametrize("rows, settings", [
    (1, {}),                  # a decoding step: one row, a matrix-vector product on the CUDA cores
    (130, {"target": "sm_80"}),  # no TMA before Hopper
])
def test_elsewhere_it_stays_in_the_operand(rows, settings):
    args = inputs(rows)
    compiled = lamina.compile(normalised_projection, args, **settings)
    assert compiled.kernel_count == 1
    assert TMA not in products(compiled)


def test_a_float32_operand_stays_in_the_operand():
    args = inputs(130, torch.float32)
    assert lamina.compile(normalised_projection, args).kernel_count == 1


def attention_then_projection(q, k, v, w):
    """Llama's attention block after RoPE: the heads' outputs side by side, then o_proj."""
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return F.linear(out.transpose(1, 2).reshape(q.shape[0], q.shape[2], -1), w)


def test_the_attention_output_is_stored_by_position_so_that_its_projection_reads_rows():
    """Compiled only: the product after attention reads its operand K-major and runs on the TMA GEMM."""
    q, k, v = (torch.randn(1, 16, 512, 64, dtype=torch.bfloat16) for _ in range(3))
    w = torch.randn(1024, 1024, dtype=torch.bfloat16)
    compiled = lamina.compile(attention_then_projection, (q, k, v, w))
    stored = {b.name: b.type.shape for b in compiled.compilation.loop.temporaries}
    assert (1, 512, 16, 64) in stored.values()
    assert products(compiled)[-1] == TMA


def test_attention_stored_by_position_gives_eager_s_numbers():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 3, 37, 16) for _ in range(3))
    w = torch.randn(20, 48)
    args = (q, k, v, w)
    out = lamina.compile(attention_then_projection, args)(*args)
    assert relative_error(out, float64_reference(attention_then_projection, args)) < 1e-5
    alone = lamina.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), (q, k, v))
    assert torch.allclose(alone(q, k, v), F.scaled_dot_product_attention(q, k, v), atol=1e-5)

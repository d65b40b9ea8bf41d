"""Matrix products with NaN, infinities and overflow, on every way lamina multiplies.

``[[3e38, 3e38]] @ [[-2.06], [1.17]]``: the GPU multiply-adds in one FFMA (NVRTC contracts
``acc + a * b``), so the first product rounds to -inf, and the second, added to -inf before it
is rounded, leaves -inf. Two rounded products would give -inf + inf = NaN, which is what the
simulator gave: it now fuses them as the GPU does. Eager's own answer to such an overflow of
the partial sums depends on its kernel's order: on an H200 and on this CPU, eager gives NaN for
this 1 x 2 x 1 product (its dot product rounds each product) and -inf for the same row inside
a 64 x 64 x 64 product (its GEMM fuses them), as lamina does. A product whose exact value
overflows, and NaN and infinities in the operands, give eager's pattern on every schedule.
On the tensor cores each operand is split into tf32 pieces, and an infinite operand's pieces
are an infinite one and a finite one, so that inf times a finite value stays an infinity
(``contraction.mma_sync.products.big_piece``), on both sides of every tensor-core product.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import lamina

from tests.numerics.nonfinite import INF, NAN, assert_same_nonfinite, planted


def _overflowing_row(device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A 64 x 64 x 64 product whose element (0, 0) is the report's: its two products overflow
    to -inf and +inf when rounded apart."""
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    a[0, :2] = 3e38
    b[:2, 0], b[2:, 0] = torch.tensor([-2.06, 1.17]), 0.0
    return a.to(device), b.to(device)


def test_the_overflowing_products_of_the_report_give_minus_infinity():
    a, b = torch.tensor([[3e38, 3e38]]), torch.tensor([[-2.06], [1.17]])
    got = lamina.compile(lambda a, b: a @ b, (a, b))(a, b)
    assert torch.isneginf(got).all(), got
    a, b = _overflowing_row("cpu")
    got, want = lamina.compile(lambda a, b: a @ b, (a, b))(a, b), a @ b
    assert torch.isneginf(want[0, 0]) and torch.isneginf(got[0, 0]), (got[0, 0], want[0, 0])


@pytest.mark.gpu
def test_the_overflowing_products_of_the_report_give_minus_infinity_on_the_gpu():
    a, b = torch.tensor([[3e38, 3e38]], device="cuda"), torch.tensor([[-2.06], [1.17]], device="cuda")
    assert torch.isneginf(lamina.compile(lambda a, b: a @ b, (a, b))(a, b)).all()
    a, b = _overflowing_row("cuda")
    got, want = lamina.compile(lambda a, b: a @ b, (a, b))(a, b), a @ b
    assert torch.isneginf(want[0, 0]) and torch.isneginf(got[0, 0]), (got[0, 0], want[0, 0])


PRODUCTS = {
    "row_reduction_1x70x1": ((1, 70, 1), {}),
    "fma_64x64x64": ((64, 64, 64), {}),
    "fma_ragged_33x70x17": ((33, 70, 17), {}),
    "split_k_16x3008x24": ((16, 3008, 24), {"contraction.split_k": 4}),
    "mma_sync_70x96x40": ((70, 96, 40), {"contraction.products": "mma_sync"}),
    "wgmma_70x96x40": ((70, 96, 40), {"contraction.products": "wgmma"}),
}
"""Shapes and pins that reach each schedule: the row reduction, the FMA contraction (ragged
too), split-K partial sums, and the tensor-core products of ``mma.sync`` and ``wgmma``."""


def _operands(m: int, k: int, n: int, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """x (m, k) and w (n, k), for ``F.linear``: NaN and infinities in a few rows of x and of w, at
    the ends of their rows too."""
    x_at = {(0, k - 1): INF, (min(1, m - 1), 0): -INF, (min(2, m - 1), k // 2): NAN}
    w_at = {(min(3, n - 1), 1): INF, (n - 1, k - 1): NAN}
    x, w = planted((m, k), dtype, x_at, seed=3, device=device), planted((n, k), dtype, w_at, seed=4, device=device)
    return x, w


def _check(name: str, dtype: torch.dtype, device: str) -> None:
    (m, k, n), knobs = PRODUCTS[name]
    x, w = _operands(m, k, n, dtype, device)
    target = {"target": "sm_90"} if device == "cpu" and "contraction.products" in knobs else {}
    compiled = lamina.Compiler(knobs=knobs, **target).compile(F.linear, (x, w))
    tolerance = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 5e-2}
    assert_same_nonfinite(compiled(x, w), _eager_linear(x, w), **tolerance)


def _eager_linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Eager's product; on the CPU a 16-bit one is taken in float32 from the same values: PyTorch's
    CPU bf16 GEMM on a processor with AMX (oneDNN's) gave NaN for the outputs of a row that holds
    an infinity, where the GPU's and the float32 product give each output's own infinity."""
    if x.device.type == "cpu" and x.dtype != torch.float32:
        return F.linear(x.float(), w.float()).to(x.dtype)
    return F.linear(x, w)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("name", PRODUCTS)
def test_nan_and_infinities_in_products_as_eager_on_the_simulator(name, dtype):
    if dtype == torch.bfloat16 and "contraction.products" in PRODUCTS[name][1]:
        pytest.skip("the tensor-core pins are for float32 products")
    _check(name, dtype, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("name", PRODUCTS)
def test_nan_and_infinities_in_products_as_eager_on_the_gpu(name, dtype):
    if dtype == torch.bfloat16 and "contraction.products" in PRODUCTS[name][1]:
        pytest.skip("the tensor-core pins are for float32 products")
    if "wgmma" in name and torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("wgmma needs a Hopper GPU")
    _check(name, dtype, "cuda")


@pytest.mark.parametrize("products", ["mma_sync", "wgmma"])
def test_an_infinite_operand_times_a_tf32_value_stays_infinite_on_the_tensor_cores(products):
    """inf * 1.0 with 1.0's small piece zero: the infinity's pieces must not meet that zero, on
    either side of the product."""
    x, w = torch.ones(32, 32), torch.ones(32, 32)
    w[7, 9] = -INF
    x[3, 5] = INF
    compiled = lamina.Compiler(knobs={"contraction.products": products}, target="sm_90").compile(F.linear, (x, w))
    assert_same_nonfinite(compiled(x, w), F.linear(x, w), rtol=0, atol=0)


def _scores(q, k):
    return torch.softmax(q @ k.transpose(-1, -2) * 0.25, -1)


def _masked_scores(q, k):
    s = (q @ k.transpose(-1, -2) * 0.25).masked_fill(torch.ones(45, 45, dtype=torch.bool).triu(1), -INF)
    return torch.softmax(s, -1)


ROW_REDUCTIONS = {
    "softmax_of_scores": (_scores, (1, 2, 37, 20), (1, 2, 37, 20)),
    "softmax_of_scores_300_columns": (_scores, (1, 2, 70, 8), (1, 2, 300, 8)),
    "causal_softmax": (_masked_scores, (2, 45, 16), (2, 45, 16)),
}


@pytest.mark.parametrize("name", ROW_REDUCTIONS)
def test_a_softmax_of_a_product_in_one_kernel_keeps_nan_and_infinities(name):
    """``matmul_row_reduction``: the product's rows reduced (max, then sum) in the kernel that
    computes them; a NaN or an infinity in q makes its rows NaN, as in eager."""
    fn, q_shape, k_shape = ROW_REDUCTIONS[name]
    q_at = {(0,) * (len(q_shape) - 2) + (3, 1): NAN, (0,) * (len(q_shape) - 2) + (5, 0): INF,
            (0,) * (len(q_shape) - 2) + (q_shape[-2] - 1, q_shape[-1] - 1): -INF}
    q, k = planted(q_shape, torch.float32, q_at, seed=5), planted(k_shape, torch.float32, {}, seed=6)
    compiled = lamina.compile(fn, (q, k))
    assert "matmul_row_reduction" in [t.schedule for t in compiled.compilation.tiles]
    assert_same_nonfinite(compiled(q, k), fn(q, k), rtol=1e-4, atol=1e-5)

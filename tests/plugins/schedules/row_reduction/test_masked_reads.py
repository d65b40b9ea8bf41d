"""A softmax whose scores a causal mask replaces past the diagonal does not read them: the
row kept in registers skips each vector (or element) that the mask leaves unused, and the
results still match PyTorch on the simulator, which stops at any read of unwritten memory."""

import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.backends.cuda.nvrtc import compile_kernel
from lamina.bench.measure import float64_reference, relative_error


def scores_causal(q, k):
    s = q @ k.transpose(-1, -2) * 0.25
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1)
    return torch.softmax(s.masked_fill(mask, float("-inf")), -1)


def sdpa_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def softmax_and_row_sum(q, k):
    """The same mask, but the scores are also summed unmasked: every score is read."""
    s = q @ k.transpose(-1, -2)
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1)
    return torch.softmax(s.masked_fill(mask, float("-inf")), -1) + s.sum(-1, keepdim=True)


PRODUCT_TILES = {"block_m": 32, "block_n": 32, "thread_m": 4, "thread_n": 4}
SEPARATE_PRODUCT = {"contraction": PRODUCT_TILES, "matmul_row_reduction": PRODUCT_TILES}
"""Product tiles pinned for both schedules: matmul_row_reduction cannot hold a row of 300 in them."""

CASES = {
    "vectors": (scores_causal, 2, SEPARATE_PRODUCT,
                "bmm[i1, i2, column] where column - i2 >= 1 at every column of a vector"),
    "elements": (sdpa_causal, 3, {},
                 "scaled_dot_product_attention_sum[0, i1, i2, column] where column > i2"),
}


def compiled_case(name):
    fn, count, knobs, _ = CASES[name]
    torch.manual_seed(0)
    inputs = tuple(torch.randn(1, 2, 300, 24) for _ in range(count))
    return fn, inputs, lamina.compile(fn, inputs, knobs=knobs)


def _rows(compiled):
    return [t for t in compiled.compilation.tiles if t.schedule == "row_reduction"]


@pytest.mark.parametrize("name", list(CASES))
def test_the_row_skips_what_the_mask_leaves_unused_and_matches_pytorch_on_the_simulator(name):
    fn, inputs, compiled = compiled_case(name)
    (row,) = [t for t in _rows(compiled) if "masked_loads" in dict(t.knobs)]
    assert dict(row.knobs)["masked_loads"] == CASES[name][3]
    assert "} else {" in compiled.compilation.sources[row.kernel.name]
    assert relative_error(compiled(*inputs), float64_reference(fn, inputs)) < 1e-5


@pytest.mark.parametrize("name", list(CASES))
def test_masked_row_kernels_compile_for_sm_90_without_spills(name):
    _, _, compiled = compiled_case(name)
    for row in _rows(compiled):
        assert compile_kernel(compiled.compilation.sources[row.kernel.name], row.kernel.name, "sm_90").spills == 0


def test_a_row_that_is_also_read_unmasked_is_read_whole():
    torch.manual_seed(0)
    q, k = torch.randn(1, 2, 300, 24), torch.randn(1, 2, 300, 24)
    compiled = lamina.compile(softmax_and_row_sum, (q, k), knobs=SEPARATE_PRODUCT)
    assert _rows(compiled) and not any("masked_loads" in dict(t.knobs) for t in _rows(compiled))
    assert relative_error(compiled(q, k), float64_reference(softmax_and_row_sum, (q, k))) < 1e-5

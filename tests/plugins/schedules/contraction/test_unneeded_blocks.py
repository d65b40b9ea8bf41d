"""Blocks whose outputs a causal mask replaces skip the product, and store nothing where no
reader uses what they would store; the masked programs match PyTorch on the simulator, whose
temporaries start as NaN."""

import functools

import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.backends.cuda.nvrtc import compile_kernel
from lamina.backends.reference.simulator import simulate
from lamina.bench.measure import float64_reference, relative_error
from lamina.plugins.schedules.contraction.recognise import analyse
from lamina.plugins.schedules.contraction.unneeded_blocks import unneeded_where

def sdpa_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def scores_causal(q, k):
    s = q @ k.transpose(-1, -2) * 0.25
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1)
    return torch.softmax(s.masked_fill(mask, float("-inf")), -1)


def scores_lower_masked(q, k):
    """The mask on the other side, written with ``where`` and ``tril``: the blocks below the diagonal skip."""
    s = q @ k.transpose(-1, -2)
    keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(-3).logical_not()
    return torch.softmax(torch.where(keep, s, float("-inf")), -1)


CASES = {
    "sdpa_causal": (sdpa_causal, 3),
    "scores_causal_masked_fill": (scores_causal, 2),
    "scores_masked_below_the_diagonal": (scores_lower_masked, 2),
}


@functools.cache
def compiled_case(name):
    """The case compiled once, for every test that reads it, its product tiles pinned for the fused
    schedule too, which cannot hold a row of 300 in them and leaves the product a contraction."""
    fn, inputs_count = CASES[name]
    torch.manual_seed(0)
    inputs = tuple(torch.randn(1, 2, 300, 24) for _ in range(inputs_count))
    tiles = {"block_m": 32, "block_n": 32, "thread_m": 4, "thread_n": 4}
    return fn, inputs, lamina.compile(fn, inputs, knobs={"contraction": tiles, "matmul_row_reduction": tiles})


def _product_kernel(compiled):
    found = [t for t in compiled.compilation.tiles if t.schedule == "contraction" and any(
        name == "unneeded_product" for name, _ in t.knobs)]
    assert len(found) == 1
    return found[0]


@pytest.mark.parametrize("name", list(CASES))
def test_masked_scores_skip_unneeded_blocks_and_match_pytorch_on_the_simulator(name):
    fn, inputs, compiled = compiled_case(name)
    tile = _product_kernel(compiled)
    assert "needed_k_tiles" in compiled.compilation.sources[tile.kernel.name]
    out = compiled(*inputs)
    assert relative_error(out, float64_reference(fn, inputs)) < 1e-5


@pytest.mark.parametrize("name", list(CASES))
def test_masked_score_kernels_compile_for_sm_90_without_spills(name):
    _, _, compiled = compiled_case(name)
    for kernel in compiled.compilation.kernels.kernels:
        result = compile_kernel(compiled.compilation.sources[kernel.name], kernel.name, "sm_90")
        assert result.spills == 0, kernel.name


def test_the_tile_ir_says_which_blocks_skip_the_product():
    _, _, compiled = compiled_case("scores_causal_masked_fill")
    note = dict(_product_kernel(compiled).knobs)["unneeded_product"]
    assert note == "a block where i2 - i1 >= 1 at every output runs no k-tile: its outputs do not use the sum"


def test_the_tile_ir_says_which_blocks_store_nothing():
    _, _, compiled = compiled_case("scores_causal_masked_fill")
    note = dict(_product_kernel(compiled).knobs)["unread_outputs"]
    assert note == ("a block where i2 - i1 >= 1 at every output runs no k-tile and stores nothing: "
                    "no kernel reads bmm there")


def test_the_product_leaves_unwritten_exactly_the_blocks_above_the_diagonal():
    """Run alone over scores that start as NaN, the product writes every block that meets the
    diagonal or lies below it, and none of the 32 x 32 blocks wholly above it."""
    fn, (q, k), compiled = compiled_case("scores_causal_masked_fill")
    kernel = next(x for x in compiled.compilation.kernels.kernels if x.name == _product_kernel(compiled).kernel.name)
    scores = torch.full((2 * 300 * 300,), float("nan"))
    simulate(kernel, {"q": q.reshape(-1), "k": k.reshape(-1), "bmm": scores})
    scores = scores.reshape(2, 300, 300)
    row, col = torch.arange(300)[:, None], torch.arange(300)[None, :]
    above = (col // 32 * 32) - (row // 32 * 32 + 31) >= 1
    assert scores[:, above].isnan().all()
    expected = (q @ k.transpose(-1, -2) * 0.25).masked_fill(col - row >= 1, float("-inf")).reshape(2, 300, 300)
    assert torch.allclose(scores[:, ~above], expected[:, ~above], rtol=1e-5, atol=1e-5)


def test_a_mask_read_from_memory_skips_nothing():
    def masked(q, k, mask):
        return torch.softmax((q @ k.transpose(-1, -2)).masked_fill(mask, float("-inf")), -1)

    torch.manual_seed(0)
    q, k = torch.randn(1, 2, 300, 24), torch.randn(1, 2, 300, 24)
    mask = torch.rand(300, 300) > 0.5
    compiled = lamina.compile(masked, (q, k, mask))
    for tile in compiled.compilation.tiles:
        if tile.schedule == "contraction":
            assert unneeded_where(analyse(tile.kernel)) is None
            assert "unneeded_product" not in dict(tile.knobs)


def test_a_mask_after_the_softmax_of_rows_held_in_blocks_skips_nothing():
    """The stores of a softmax held in registers keep only what the mask allows, yet every
    score feeds the row's maximum and sum: no block may skip its product."""

    def masked_after(q, k):
        p = torch.softmax(q @ k.transpose(-1, -2), -1)
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1)
        return p.masked_fill(keep, 0.0)

    torch.manual_seed(0)
    q, k = torch.randn(1, 2, 300, 24), torch.randn(1, 2, 300, 24)
    compiled = lamina.compile(masked_after, (q, k))
    assert [t.schedule for t in compiled.compilation.tiles] == ["matmul_row_reduction"]
    assert not any("needed_k_tiles" in source for source in compiled.compilation.sources.values())
    assert relative_error(compiled(q, k), float64_reference(masked_after, (q, k))) < 1e-5

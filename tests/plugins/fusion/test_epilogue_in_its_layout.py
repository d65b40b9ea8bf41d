"""A product's epilogue that stores the product's columns split into heads and features, fused with
the product's loops kept (``epilogue_in_its_layout``): the product stores each value where the
epilogue would have put it, and the Hopper GEMM still stores adjacent features in pairs."""

import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.bench.measure import float64_reference, relative_error
from lamina.core.ir import expr as ex, loop_ir, tile_ir
from lamina.plugins.fusion.epilogue_in_its_layout import digits

from tests.core.stages import tensor_programs as tp

from .test_reduction_into_consumer import fused, lines, reduce_loops


def _heads(b, product: str, heads: int, features: int, positions: int) -> str:
    """(positions, heads x features) read as (heads, positions, features)."""
    return b.index_map(product, (heads, positions, features), lambda d: (d[1], d[0] * features + d[2]), "permute")


def test_a_product_split_into_heads_stores_its_epilogue_at_each_head_s_place():
    b = tp.TensorProgramBuilder()
    product = tp.matmul(b, b.input("x", 20, 8), b.input("w", 8, 64))
    bias = b.index_map(b.input("bias", 64), (20, 64), lambda d: (d[1],))
    biased = b.elementwise("biased", tp.add, product, bias)
    program = fused(b.program(_heads(b, biased, 4, 16, 20)))
    (kernel,) = program.kernels
    assert lines(kernel)[-1] == "permute[i1 // 16, i0, i1 % 16] = acc0 + bias[i1]"
    assert len(reduce_loops(program)) == 1 and program.temporaries == ()


def test_digits_cover_each_dimension_once_or_not_at_all():
    i1, i2, i3 = ex.Var("i1"), ex.Var("i2"), ex.Var("i3")
    extents = {"i0": 1, "i1": 4, "i2": 20, "i3": 16}
    heads = digits((i2, ex.op("add", ex.op("mul", i1, ex.const(16)), i3)), (20, 64), extents)
    assert heads == {"i2": (0, 1, 20), "i1": (1, 16, 4), "i3": (1, 1, 16)}
    # every other group of 16 columns of 128: not every element
    assert digits((i2, ex.op("add", ex.op("mul", i1, ex.const(32)), i3)), (20, 128), extents) is None
    # a variable in two coordinates
    assert digits((i3, ex.op("add", ex.op("mul", i1, ex.const(16)), i3)), (16, 64), extents) is None


def test_an_epilogue_that_walks_the_product_across_its_rows_is_left_apart():
    """The heads' features outermost: the product's stores would be an element per row."""
    b = tp.TensorProgramBuilder()
    product = tp.matmul(b, b.input("x", 20, 8), b.input("w", 8, 64))
    across = b.index_map(product, (16, 4, 20), lambda d: (d[2], d[1] * 16 + d[0]), "across")
    program = fused(b.program(b.elementwise("twice", lambda v: tp.mul(v, 2.0), across)))
    assert [k.name for k in program.kernels] == ["sum", "twice"]


def _scaled_heads(x, w, b):
    """A product whose own epilogue (the scale, the bias) names its columns, then split into heads."""
    return (x @ w.T * 2.0 + b).view(x.shape[0], -1, 16).transpose(0, 1)


def test_the_product_s_own_epilogue_keeps_its_columns_where_the_heads_take_their_places():
    torch.manual_seed(0)
    args = (torch.randn(20, 8), torch.randn(64, 8), torch.randn(64))
    compiled = lamina.compile(_scaled_heads, args)
    (kernel,) = compiled.compilation.loop.kernels
    assert lines(kernel)[-1] == "transpose[i1 // 16, i0, i1 % 16] = acc0 * 2.0 + b[i1]"
    assert torch.allclose(compiled(*args), _scaled_heads(*args), atol=1e-5)


def _attention_with_biased_projections(x, wq, bq, wk, bk, wv, bv):
    """BERT's self-attention: three projections with biases, each viewed per head."""
    positions, heads = x.shape[0], wq.shape[0] // 64

    def per_head(t):
        return t.view(1, positions, heads, 64).transpose(1, 2)

    q, k, v = (per_head(F.linear(x, w, b)) for w, b in ((wq, bq), (wk, bk), (wv, bv)))
    return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(positions, -1)


def test_biased_projections_store_their_heads_for_attention_and_match_eager_on_the_simulator():
    torch.manual_seed(0)
    positions, width = 72, 128
    x = torch.randn(positions, width, dtype=torch.bfloat16)
    weights = [t for _ in range(3) for t in (torch.randn(width, width, dtype=torch.bfloat16) / width ** 0.5,
                                             torch.randn(width, dtype=torch.bfloat16))]
    args = (x, *weights)
    compiled = lamina.compile(_attention_with_biased_projections, args, target="sm_90",
                              knobs={"contraction": {"products": "wgmma_tma"}})
    (tile,) = [t for t in compiled.compilation.tiles if t.schedule == "contraction"]
    assert len(tile.settings.pieces) == 3  # the three products side by side in one kernel
    stores = [s for s in loop_ir.statements(tile.kernel.body) if isinstance(s, loop_ir.Store)]
    assert len(stores) == 3
    for store in stores:
        assert [ex.format_expr(i) for i in store.index][1:] == ["i1 // 64", "i0", "i1 % 64"]
    assert "epilogue_stores = 2 adjacent outputs per store (4 B)" in tile_ir.format_tile_kernel(tile)
    exact = float64_reference(_attention_with_biased_projections, args)
    eager = _attention_with_biased_projections(*args)
    assert relative_error(compiled(*args), exact) <= 1.25 * relative_error(eager, exact) + 1e-3


def _batch_of_heads(x, w, b):
    """A projection over a batch of 3 sequences whose rows come flattened, as AOTAutograd hands a
    linear layer over a batch, stored per head for attention: each row splits into its sequence and
    position."""
    return F.linear(x, w, b).view(3, x.shape[0] // 3, w.shape[0] // 64, 64).transpose(1, 2).contiguous()


def test_a_batch_s_rows_split_into_sequences_still_store_adjacent_features_in_pairs():
    """The row's sequence and position (``i0 // 40``, ``i0 % 40``) stay the same along a run of
    columns: BERT's projections at batch 8 stored one feature per access before."""
    torch.manual_seed(0)
    x = torch.randn(120, 128, dtype=torch.bfloat16)
    args = (x, torch.randn(128, 128, dtype=torch.bfloat16) / 128 ** 0.5, torch.randn(128, dtype=torch.bfloat16))
    compiled = lamina.compile(_batch_of_heads, args, target="sm_90", knobs={"contraction": {"products": "wgmma_tma"}})
    (tile,) = compiled.compilation.tiles
    (store,) = [s for s in loop_ir.statements(tile.kernel.body) if isinstance(s, loop_ir.Store)]
    assert [ex.format_expr(i) for i in store.index] == ["i0 // 40", "i1 // 64", "i0 % 40", "i1 % 64"]
    assert "epilogue_stores = 2 adjacent outputs per store (4 B)" in tile_ir.format_tile_kernel(tile)
    exact = float64_reference(_batch_of_heads, args)
    assert relative_error(compiled(*args), exact) <= 1.25 * relative_error(_batch_of_heads(*args), exact) + 1e-3


@pytest.mark.gpu
def test_biased_projections_store_their_heads_for_attention_and_match_float64_on_the_gpu():
    """BERT-base's self-attention at 512 positions, through ``torch.compile`` as a user runs it."""
    torch.manual_seed(0)
    width = 768
    x = torch.randn(512, width, dtype=torch.bfloat16, device="cuda")
    weights = [t for _ in range(3) for t in (torch.randn(width, width, dtype=torch.bfloat16, device="cuda") / width ** 0.5,
                                             torch.randn(width, dtype=torch.bfloat16, device="cuda"))]
    args = (x, *weights)
    compiled = torch.compile(_attention_with_biased_projections, backend="lamina")
    exact = float64_reference(_attention_with_biased_projections, args)
    eager = _attention_with_biased_projections(*args)
    assert relative_error(compiled(*args), exact) <= 1.25 * relative_error(eager, exact) + 1e-3

"""Blocks whose outputs a causal mask replaces skip the product: the test of a block is
sound (it never skips a block with an output that uses the sum), the kernel still
stores every output, and the masked programs match PyTorch on the simulator."""

import itertools
import random

import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.backends.cuda.nvrtc import compile_kernel
from lamina.bench.measure import float64_reference, relative_error
from lamina.core.ir import dtypes, expr as ex
from lamina.plugins.schedules.contraction.recognise import analyse
from lamina.plugins.schedules.contraction.unneeded_blocks import holds_over_block, unneeded_where

ROW, COL = ex.Var("i", dtypes.index), ex.Var("j", dtypes.index)


def _value(e, env):
    if isinstance(e, ex.Const):
        return e.value
    if isinstance(e, ex.Var):
        return env[e.name]
    args = [_value(a, env) for a in e.args]
    return {
        "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
        "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
        "and": lambda a, b: a and b, "or": lambda a, b: a or b, "not": lambda a: not a, "neg": lambda a: -a,
    }[e.op](*args)


def _conditions():
    comparisons = []
    for name, (a, b), shift in itertools.product(("lt", "le", "gt", "ge"), ((ROW, COL), (COL, ROW)), (-3, 0, 1, 5)):
        comparisons.append(ex.op(name, a - b, shift))
    comparisons.append(ex.op("ge", COL * 2 - ROW, 4))
    combined = [ex.op("and", comparisons[0], comparisons[9]), ex.op("or", comparisons[3], comparisons[12]),
                ex.op("not", comparisons[5]), ex.op("and", comparisons[2], ex.const(True))]
    return comparisons + combined


@pytest.mark.parametrize("condition", _conditions(), ids=lambda c: ex.format_expr(c))
def test_a_block_is_skipped_only_where_the_condition_holds_at_every_output(condition):
    first_row, first_col = ex.Var("row0", dtypes.index), ex.Var("col0", dtypes.index)
    test = holds_over_block(condition, {"i": (first_row, first_row + 7), "j": (first_col, first_col + 3)})
    assert test is not None
    exact = condition.op != "or"  # one side may hold over part of a block and the other over the rest
    rng = random.Random(0)
    for _ in range(300):
        row0, col0 = rng.randrange(-12, 12), rng.randrange(-12, 12)
        everywhere = all(_value(condition, {"i": row0 + a, "j": col0 + b}) for a in range(8) for b in range(4))
        claimed = _value(test, {"row0": row0, "col0": col0})
        assert claimed == everywhere if exact else not claimed or everywhere


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


def compiled_case(name):
    fn, inputs_count = CASES[name]
    torch.manual_seed(0)
    inputs = tuple(torch.randn(1, 2, 300, 24) for _ in range(inputs_count))
    knobs = {"block_m": 32, "block_n": 32, "thread_m": 4, "thread_n": 4}
    return fn, inputs, lamina.compile(fn, inputs, knobs=knobs)


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
    assert [t.schedule for t in compiled.compilation.tiles] == ["contraction_rows"]
    assert not any("needed_k_tiles" in source for source in compiled.compilation.sources.values())
    assert relative_error(compiled(q, k), float64_reference(masked_after, (q, k))) < 1e-5

"""Row reductions whose rows share what they reduce (a cumulative sum's triangle), and whose
epilogue runs over another length than the reduction (OPT's positions: a cumulative sum of the
padding mask over the tokens, read by a gather of every feature of each token), run by the
Kernel IR simulator against eager PyTorch. Lengths are no multiples of a warp or a vector."""

import pytest
import torch

import lamina
from lamina.bench.measure import float64_reference, relative_error
from lamina.plugins.schedules.row_reduction import analyse

SCHEDULES = {"row_reduction"}


def compiled(fn, inputs, **settings):
    specialization = lamina.Compiler(**settings).specialize(fn, inputs)
    return specialization, tuple(specialization(list(inputs), torch.device("cpu")))


def schedules(specialization):
    return {t.kernel.name: t.schedule for t in specialization.compilation.tiles}


def opt_embedding(ids, mask, tokens, positions):
    """OPT's input embedding: each token's position is the count of unpadded tokens up to it."""
    position = (torch.cumsum(mask, dim=1) * mask - 1).long() + 2
    return tokens[ids] + positions[position]


@pytest.mark.parametrize("length, features", [(37, 72), (130, 20), (1, 12)])
def test_positions_from_the_padding_mask_gathered_over_another_length(length, features):
    torch.manual_seed(0)
    ids = torch.randint(0, 50, (1, length))
    mask = (torch.rand(1, length) > 0.3).long()
    mask[0, -1] = 1
    tokens, positions = torch.randn(50, features), torch.randn(length + 2, features)
    specialization, (got,) = compiled(opt_embedding, (ids, mask, tokens, positions))
    if length > 1:
        (tile,) = [t for t in specialization.compilation.tiles if t.reduction is not None]
        assert tile.schedule == "row_reduction"
        row = analyse(tile.kernel)
        assert (row.reduce_length, row.length, row.one_length) == (length, max(length, features), length == features)
        assert dict(tile.knobs)["row_in_registers"] is False
    assert torch.equal(got, opt_embedding(ids, mask, tokens, positions))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize("shape", [(3, 33), (5, 300)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_a_cumulative_sum_is_a_row_reduction_over_rows_that_share_their_reads(shape, dtype):
    torch.manual_seed(1)
    x = torch.randn(shape) if dtype.is_floating_point else torch.randint(-5, 5, shape)
    specialization, (got,) = compiled(lambda x: torch.cumsum(x, dim=1), (x,))
    assert set(schedules(specialization).values()) == SCHEDULES
    want = float64_reference(lambda x: torch.cumsum(x, dim=1), (x,)) if dtype.is_floating_point else x.cumsum(1)
    if dtype.is_floating_point:
        assert relative_error(got, want) < 1e-5
    else:
        assert torch.equal(got, want)


def test_a_reduction_over_part_of_the_row_scales_the_whole_row():
    """The reduction reads the first 50 elements, the epilogue all 100: the same elements are read
    by loops of both lengths, each from memory."""
    torch.manual_seed(2)
    x = torch.randn(7, 100)

    def fn(x):
        return x * x[:, :50].sum(-1, keepdim=True)

    specialization, (got,) = compiled(fn, (x,))
    (tile,) = specialization.compilation.tiles
    assert tile.schedule == "row_reduction" and dict(tile.knobs)["row_in_registers"] is False
    assert relative_error(got, float64_reference(fn, (x,))) < 1e-5


def test_keeping_rows_of_two_lengths_in_registers_is_refused_with_the_reason():
    x = torch.randn(7, 100)
    with pytest.raises(lamina.LaminaError, match="every loop over the row to have one length"):
        lamina.Compiler(knobs={"row_reduction": {"row_in_registers": True}}).specialize(
            lambda x: x * x[:, :50].sum(-1, keepdim=True), (x,))

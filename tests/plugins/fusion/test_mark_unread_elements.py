"""A temporary's elements that every reader masks away are marked unread, and only those."""

import attrs
import pytest
import torch

import lamina
from lamina.backends.cuda.targets import SM90 as SM_90
from lamina.core.errors import VerificationError
from lamina.core.ir import expr as ex, loop_ir
from lamina.plugins.fusion.mark_unread_elements import MarkUnreadElements

PRODUCT_TILES = {"block_m": 32, "block_n": 32, "thread_m": 4, "thread_n": 4}
TWO_KERNELS = {"contraction": PRODUCT_TILES, "matmul_row_reduction": PRODUCT_TILES}
"""Product tiles pinned for both schedules keep the scores of 300 columns a product and a softmax:
matmul_row_reduction cannot hold the row in them."""


def causal_mask(q, k):
    return torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1)


def scores_causal(q, k):
    return torch.softmax((q @ k.transpose(-1, -2) * 0.25).masked_fill(causal_mask(q, k), float("-inf")), -1)


def scores_causal_and_row_sums(q, k):
    """A second reader sums every score, masked or not."""
    s = q @ k.transpose(-1, -2)
    return torch.softmax(s.masked_fill(causal_mask(q, k), float("-inf")), -1) * s.sum(-1, keepdim=True)


def scores_masked_by_memory(q, k, mask):
    return torch.softmax((q @ k.transpose(-1, -2)).masked_fill(mask, float("-inf")), -1)


def loop_program(fn, *extra):
    torch.manual_seed(0)
    inputs = (torch.randn(1, 2, 300, 24), torch.randn(1, 2, 300, 24), *extra)
    return lamina.compile(fn, inputs, knobs=TWO_KERNELS).compilation.loop


def test_the_causal_scores_are_unread_above_the_diagonal():
    program = loop_program(scores_causal)
    (scores,) = program.temporaries
    assert loop_ir.format_value(scores.unread) == "i2 - i1 >= 1"
    assert "  buffer bmm: f32[2, 300, 300], unread where i2 - i1 >= 1" in loop_ir.format_program(program).splitlines()
    writer, reader = program.kernels
    assert writer.buffer("bmm") == reader.buffer("bmm") == scores


def test_a_mask_that_chooses_the_score_marks_the_opposite_comparison():
    """``where(keep, s, -inf)`` leaves ``s`` unused where ``keep`` fails: ``i2 - i1 > 0`` for
    ``tril``, written as a comparison rather than as ``not (i2 - i1 <= 0)``."""

    def scores_kept_on_and_below(q, k):
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        return torch.softmax(torch.where(keep, q @ k.transpose(-1, -2), float("-inf")), -1)

    (scores,) = loop_program(scores_kept_on_and_below).temporaries
    assert loop_ir.format_value(scores.unread) == "i2 - i1 > 0"


@pytest.mark.parametrize("fn, extra", [
    (scores_causal_and_row_sums, ()),
    (scores_masked_by_memory, (torch.rand(300, 300) > 0.5,)),
], ids=["a_reader_uses_every_score", "the_mask_is_read_from_memory"])
def test_nothing_is_marked_unless_every_read_is_masked_on_coordinates(fn, extra):
    program = loop_program(fn, *extra)
    assert program.temporaries
    assert all(t.unread is None for t in program.temporaries)


def replaced(program, old, new):
    """``program`` with buffer ``old`` replaced by ``new`` wherever it appears."""
    def swap(found):
        return tuple(new if b == old else b for b in found)

    kernels = tuple(attrs.evolve(k, inputs=swap(k.inputs), outputs=swap(k.outputs)) for k in program.kernels)
    return attrs.evolve(program, temporaries=swap(program.temporaries), outputs=swap(program.outputs), kernels=kernels)


def test_a_mark_that_no_longer_holds_is_taken_back():
    program = loop_program(scores_causal_and_row_sums)
    (scores,) = [t for t in program.temporaries if "bmm" in t.name]
    stale = replaced(program, scores, attrs.evolve(scores, unread=ex.op("ge", loop_ir.axis_var(2) - loop_ir.axis_var(1), 1)))
    assert MarkUnreadElements().apply(stale, SM_90, {}) == program


def test_the_verifier_rejects_a_mark_on_other_variables_or_on_an_output():
    program = loop_program(scores_causal)
    (scores,) = program.temporaries
    with pytest.raises(VerificationError, match="may use only its coordinates i0, i1, i2"):
        loop_ir.verify_program(replaced(program, scores, attrs.evolve(scores, unread=ex.op("ge", ex.Var("r0"), 1))))
    (output,) = program.outputs
    with pytest.raises(VerificationError, match="softmax is marked unread .* not a temporary"):
        loop_ir.verify_program(replaced(program, output, attrs.evolve(output, unread=ex.op("ge", loop_ir.axis_var(3), 1))))

"""A model's layers repeat: a rule that would make one change per call makes, in that call,
every other change that writes nothing those before it read or wrote (and reads nothing they
wrote), so that fusing six layers takes as many changes as fusing two, and every layer fuses as
the first, even where every layer reads one temporary (a rotation's tables)."""

import collections

import pytest
import torch

import lamina
from lamina.api import Compiler
from lamina.backends.cuda.targets import SM90 as SM_90
from lamina.core.stages.fuse import fuse
from lamina.core.stages.lower_to_loops import lower_to_loops

H, S = 64, 80


def layers(x, norms, weights):
    """Decoder-like layers: a norm, a bf16 product, a softmax over its rows, a residual add."""
    for w_norm, w in zip(norms, weights):
        h = x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * w_norm
        x = x + torch.softmax((h @ w).float(), -1).to(x.dtype) @ w.T
    return x


def layers_reading_one_table(x, norms, weights):
    """The layers above, each scaling its norm by one table that all of them read, computed once
    (its row maxima: a reduction, which is never recomputed in its readers)."""
    table = x.float().abs().amax(-1, keepdim=True).to(x.dtype)
    for w_norm, w in zip(norms, weights):
        h = x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * w_norm * table
        x = x + torch.softmax((h @ w).float(), -1).to(x.dtype) @ w.T
    return x


def float32_attention_layers(x, weights):
    """Layers of float32 attention: the scores computed in their softmax
    (``fuse_contraction_into_row_reduction``), then the chain as one kernel (``fuse_float32_attention``,
    pinned: at these sizes the kernels apart are expected faster)."""
    for w in weights:
        x = x + torch.softmax((x @ w) @ x.T * 0.125, -1) @ x
    return x


def decoding_layers(query, caches):
    """A decoding step's attention in each layer: eight query heads, each pair reading one of four
    cached heads of 128 positions (``fuse_decode_attention``)."""
    for keys in caches:
        query = query + torch.nn.functional.scaled_dot_product_attention(query, keys, keys, enable_gqa=True)
    return query


def _layer_inputs(count, dtype=torch.bfloat16):
    torch.manual_seed(count)
    x = torch.randn(S, H, dtype=dtype)
    norms = [torch.randn(H, dtype=dtype) for _ in range(count)]
    weights = [torch.randn(H, H, dtype=dtype) for _ in range(count)]
    return x, norms, weights


def _float32_attention_inputs(count):
    x, _, weights = _layer_inputs(count, torch.float32)
    return x, weights


def _decoding_inputs(count):
    torch.manual_seed(count)
    return torch.randn(1, 8, 1, H, dtype=torch.bfloat16), [torch.randn(1, 4, 128, H, dtype=torch.bfloat16)
                                                           for _ in range(count)]


def _tensor_program(count, function=layers, inputs=_layer_inputs):
    return lamina.compile(function, inputs(count), target="sm_90").compilation.tensor


class _Counted:
    """A rule, its changes counted."""

    def __init__(self, rule, changes):
        self.rule, self.changes = rule, changes
        self.name, self.priority = rule.name, rule.priority

    def apply(self, program, target, knobs):
        result = self.rule.apply(program, target, knobs)
        if result is not None and result != program:
            self.changes[self.name] += 1
        return result


def _fused(count, function=layers, inputs=_layer_inputs, knobs=None):
    rules = [e.provider for e in Compiler().plugins.registry.ranked("fusion_rule")]
    changes = collections.Counter()
    program = fuse(lower_to_loops(_tensor_program(count, function, inputs)), [_Counted(r, changes) for r in rules],
                   SM_90, knobs or {})
    return program, changes


def test_six_layers_fuse_in_as_many_changes_as_two():
    """(The first layer differs from the others: its input is no residual sum.)"""
    two, two_changes = _fused(2)
    six, six_changes = _fused(6)
    assert six_changes == two_changes, (two_changes, six_changes)
    assert len(six.kernels) - len(two.kernels) == 4 * (len(two.kernels) - len(_fused(1)[0].kernels))


def test_layers_reading_one_temporary_fuse_in_as_many_changes_as_two():
    two, two_changes = _fused(2, layers_reading_one_table)
    six, six_changes = _fused(6, layers_reading_one_table)
    assert six_changes == two_changes, (two_changes, six_changes)
    one = _fused(1, layers_reading_one_table)[0]
    assert len(six.kernels) - len(two.kernels) == 4 * (len(two.kernels) - len(one.kernels))


@pytest.mark.parametrize("function,inputs,knobs,rule", [
    (float32_attention_layers, _float32_attention_inputs, {}, "fuse_contraction_into_row_reduction"),
    (float32_attention_layers, _float32_attention_inputs, {"fuse_float32_attention": {"block_queries": 64}},
     "fuse_float32_attention"),
    (decoding_layers, _decoding_inputs, {}, "fuse_decode_attention"),
], ids=["scores-in-their-softmax", "float32-attention", "decoding-attention"])
def test_attention_layers_fuse_in_as_many_changes_as_two(function, inputs, knobs, rule):
    one, _ = _fused(1, function, inputs, knobs)
    two, two_changes = _fused(2, function, inputs, knobs)
    six, six_changes = _fused(6, function, inputs, knobs)
    assert two_changes[rule] > 0, two_changes
    assert six_changes == two_changes, (two_changes, six_changes)
    assert len(six.kernels) - len(two.kernels) == 4 * (len(two.kernels) - len(one.kernels))


def test_the_fused_layers_match_eager_on_the_simulator():
    torch.manual_seed(3)
    x = torch.randn(S, H, dtype=torch.bfloat16)
    norms = [torch.randn(H, dtype=torch.bfloat16) for _ in range(3)]
    weights = [torch.randn(H, H, dtype=torch.bfloat16) * 0.1 for _ in range(3)]
    for function in (layers, layers_reading_one_table):
        compiled = lamina.compile(function, (x, norms, weights))
        torch.testing.assert_close(compiled(x, norms, weights), function(x, norms, weights), rtol=2e-2, atol=2e-2)

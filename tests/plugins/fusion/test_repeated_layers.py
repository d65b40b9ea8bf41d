"""A model's layers repeat: a rule that would make one change per call makes, in that call,
every other change that writes nothing those before it read or wrote (and reads nothing they
wrote), so that fusing six layers takes as many changes as fusing two, and every layer fuses as
the first, even where every layer reads one temporary (a rotation's tables)."""

import collections

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


def _tensor_program(count, function=layers):
    torch.manual_seed(count)
    x = torch.randn(S, H, dtype=torch.bfloat16)
    norms = [torch.randn(H, dtype=torch.bfloat16) for _ in range(count)]
    weights = [torch.randn(H, H, dtype=torch.bfloat16) for _ in range(count)]
    return lamina.compile(function, (x, norms, weights), target="sm_90").compilation.tensor


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


def _fused(count, function=layers):
    rules = [e.provider for e in Compiler().plugins.registry.ranked("fusion_rule")]
    changes = collections.Counter()
    program = fuse(lower_to_loops(_tensor_program(count, function)), [_Counted(r, changes) for r in rules], SM_90, {})
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


def test_the_fused_layers_match_eager_on_the_simulator():
    torch.manual_seed(3)
    x = torch.randn(S, H, dtype=torch.bfloat16)
    norms = [torch.randn(H, dtype=torch.bfloat16) for _ in range(3)]
    weights = [torch.randn(H, H, dtype=torch.bfloat16) * 0.1 for _ in range(3)]
    for function in (layers, layers_reading_one_table):
        compiled = lamina.compile(function, (x, norms, weights))
        torch.testing.assert_close(compiled(x, norms, weights), function(x, norms, weights), rtol=2e-2, atol=2e-2)

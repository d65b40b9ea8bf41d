"""The exported program lowered to core ATen node by node (``core_aten``), where it needs no trace:
the same Torch IR as ``run_decompositions`` gives, and ``run_decompositions`` where it does."""

from __future__ import annotations

import collections
import sys

import pytest
import torch
from torch.export import ExportedProgram

import lamina
from lamina.frontends.torch import capture
from lamina.models.architectures import architecture, build, example_inputs

capture_module = sys.modules["lamina.frontends.torch.capture"]


def captured_both_ways(monkeypatch, program, inputs, kwargs=None):
    """The Torch IR of ``program`` lowered node by node and by ``run_decompositions``, and whether
    the first needed ``run_decompositions``."""
    traced = []
    original = ExportedProgram.run_decompositions

    def counted(self, *args, **kw):
        traced.append(True)
        return original(self, *args, **kw)

    monkeypatch.setattr(ExportedProgram, "run_decompositions", counted)
    fast = capture(program, inputs, example_kwargs=kwargs)
    needed_trace = bool(traced)
    monkeypatch.setattr(capture_module, "rewritten", lambda *args: None)
    slow = capture(program, inputs, example_kwargs=kwargs)
    return fast.graph, slow.graph, needed_trace


def ops(graph) -> collections.Counter:
    return collections.Counter(node.target for node in graph.nodes)


def views_and_casts(x, y):
    """Every op the node-by-node lowering writes: ``reshape`` of a transposed tensor (a copy, then a
    view) and of a contiguous one (a view), ``to`` that changes the dtype and one that does not,
    ``new_ones``, ``&``, ``arange``, a constant tensor and ``detach`` (which fold into an input)."""
    flipped = x.transpose(0, 1).reshape(-1)
    flat = y.reshape(2, -1)
    mask = x.new_ones((), dtype=torch.bool) & (x > 0).to(torch.bool)
    steps = torch.arange(x.shape[1]).to(x.dtype) + torch.tensor(0.5, dtype=x.dtype).detach()
    return flipped.to(torch.float64).to(torch.float32), flat, torch.where(mask, x, steps)


def updated_temporaries(x, y):
    """In-place updates of temporaries, as T5's relative position buckets are summed: read before
    the update and after it, updated twice; one of a view is left to the whole trace."""
    buckets = (x > 0).to(torch.long) * 16
    before = buckets * 3
    buckets += (y > 0).to(torch.long)
    buckets += 1
    return before, buckets * 2, torch.sin(x)


class NormsAndSplits(torch.nn.Module):
    """The rest: ``layer_norm``, dropout outside training, ``split``, ``chunk``, ``contiguous`` and
    ``type_as``."""

    def __init__(self):
        super().__init__()
        self.norm, self.dropout = torch.nn.LayerNorm(12), torch.nn.Dropout(0.1)

    def forward(self, x, y):
        a, b, c = self.dropout(self.norm(x)).split(4, dim=-1)
        d, e = y.chunk(2, dim=0)
        return (a * b).transpose(0, 1).contiguous(), c.contiguous(), d.type_as(x).sum(0) + e.type_as(y).sum(0)


class Convolutions(torch.nn.Module):
    """A convolution, batch norm, max pool, global average pool and flatten; a 1-d convolution."""

    def __init__(self):
        super().__init__()
        self.image = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4),
                                         torch.nn.MaxPool2d(2, ceil_mode=True), torch.nn.AdaptiveAvgPool2d(1),
                                         torch.nn.Flatten())
        self.sound = torch.nn.Conv1d(2, 3, 3, stride=2)

    def forward(self, x, y):
        return self.image(x), self.sound(y)


class RotaryAngles(torch.nn.Module):
    """A product under ``torch.autocast(enabled=False)``, as a model's rotary embedding computes its
    angles: the block written in place, the product (``matmul``, which its shapes lower) traced
    alone."""

    def forward(self, x, positions):
        with torch.autocast(device_type="cpu", enabled=False):
            angles = (x.float()[None, :, None] @ positions.float()[:, None, :]).transpose(1, 2)
        return angles.cos().to(x.dtype) + 1


class RotaryAnglesWithoutGrad(torch.nn.Module):
    """The same angles under ``torch.no_grad()`` around the autocast block, as a rotary embedding's
    forward decorated with ``torch.no_grad`` computes them: both blocks written in place."""

    def forward(self, x, positions):
        with torch.no_grad():
            with torch.autocast(device_type="cpu", enabled=False):
                angles = (x.float()[None, :, None] @ positions.float()[:, None, :]).transpose(1, 2)
            sines = angles.sin()
        return angles.cos().to(x.dtype) + 1, sines


PROGRAMS = {
    "rotary_angles": (RotaryAngles(), lambda: (torch.randn(8, dtype=torch.bfloat16), torch.randn(1, 16))),
    "rotary_angles_without_grad": (RotaryAnglesWithoutGrad(),
                                   lambda: (torch.randn(8, dtype=torch.bfloat16), torch.randn(1, 16))),
    "convolutions": (Convolutions().eval(), lambda: (torch.randn(2, 3, 9, 7), torch.randn(1, 2, 11))),
    "views_and_casts": (views_and_casts, lambda: (torch.randn(5, 7), torch.randn(6, 4))),
    "updated_temporaries": (updated_temporaries, lambda: (torch.randn(5, 7), torch.randn(5, 7))),
    "norms_and_splits": (NormsAndSplits().eval(),
                         lambda: (torch.randn(3, 12), torch.randint(-4, 4, (7, 3), dtype=torch.int32))),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_each_rewrite_gives_the_ops_the_trace_gives(monkeypatch, name):
    program, inputs = PROGRAMS[name]
    fast, slow, needed_trace = captured_both_ways(monkeypatch, program, inputs())
    assert not needed_trace
    assert ops(fast) == ops(slow)
    unlowered = {"aten.transpose.int", "aten.conv2d.default", "aten.reshape.default", "aten.matmul.default"}
    assert not unlowered & set(ops(fast))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_rewritten_programs_match_eager(name):
    program, inputs = PROGRAMS[name]
    args = inputs()
    compiled = lamina.compile(program, args)
    for got, want in zip(compiled(*args), program(*args)):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("name", ["llama", "qwen2", "gpt2", "phi3", "t5-encoder"])
def test_models_need_no_trace_and_give_the_same_ops(monkeypatch, name):
    arch = architecture(name)
    model = build(arch, size="small", layers=1)
    inputs = example_inputs(arch, model)
    fast, slow, needed_trace = captured_both_ways(monkeypatch, model, (), inputs)
    assert not needed_trace
    assert ops(fast) == ops(slow)


def test_an_update_through_a_view_takes_the_whole_trace(monkeypatch):
    """An op that writes through a view needs the program functionalized: ``run_decompositions``
    does it (an update of a whole temporary is written in its functional form)."""

    def accumulate(total, x):
        doubled = total * 2
        doubled[:3].add_(x.reshape(-1)[:3])
        return doubled

    fast, slow, needed_trace = captured_both_ways(monkeypatch, accumulate, (torch.randn(6), torch.randn(2, 3)))
    assert needed_trace
    assert ops(fast) == ops(slow)

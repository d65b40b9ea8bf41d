"""Constant folding at capture: what depends only on shapes and constants becomes a constant input."""

from __future__ import annotations

import functools
import math

import torch

import lamina
from lamina.core.ir import torch_ir
from lamina.core.stages.decompose import decompose
from lamina.frontends.torch import capture, folding
from lamina.plugins.ops.plugin import DECOMPOSITIONS
from tests.plugins.ops.lowering import assert_matches, lower, run

LENGTH, WIDTH = 11, 16


class Rotary(torch.nn.Module):
    """Rotary angles from a non-persistent buffer, a causal mask from shapes, and real state beside them."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(WIDTH, WIDTH)
        inv_freq = 1.0 / 10000 ** (torch.arange(0, WIDTH, 2).float() / WIDTH)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.register_buffer("gain", torch.randn(WIDTH))

    def forward(self, x):
        n = x.shape[0]
        angles = torch.outer(torch.arange(n).float(), self.inv_freq)
        emb = torch.cat([angles, angles], -1)
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        h = self.proj(x) * emb.cos() + x * emb.sin() * (self.gain * 2)
        scores = h @ h.T / math.sqrt(WIDTH)
        return torch.where(causal, scores, float("-inf")).softmax(-1)


def _rotary_constants():
    angles = torch.outer(torch.arange(LENGTH).float(), 1.0 / 10000 ** (torch.arange(0, WIDTH, 2).float() / WIDTH))
    emb = torch.cat([angles, angles], -1)
    return emb.cos(), emb.sin(), torch.ones(LENGTH, LENGTH, dtype=torch.bool).tril()


@functools.cache
def captured_rotary():
    return capture(Rotary(), (torch.randn(LENGTH, WIDTH),))


def test_shape_and_constant_subgraphs_become_constant_inputs():
    captured = captured_rotary()
    kinds = {i.name: i.kind for i in captured.graph.inputs}
    constants = sorted(name for name, kind in kinds.items() if kind == "constant")
    assert {name: kind for name, kind in kinds.items() if kind != "constant"} == {
        "p_proj_weight": "parameter", "p_proj_bias": "parameter", "b_gain": "buffer", "x": "user"}
    values = [captured.constants[name] for name in constants]
    cos, sin, _ = _rotary_constants()
    assert len(values) == 2
    assert any(v.shape == cos.shape and torch.allclose(v, cos) for v in values)
    assert any(v.shape == sin.shape and torch.allclose(v, sin) for v in values)
    targets = {n.target for n in captured.graph.nodes}
    assert targets.isdisjoint({"aten.cos.default", "aten.sin.default", "aten.cat.default", "aten.outer.default"})
    assert "aten.mul.Tensor" in targets


def test_a_mask_built_from_coordinates_stays_ops_that_compute_it():
    captured = captured_rotary()
    mask_ops = [n for n in captured.graph.nodes if n.target in ("aten.ge.Scalar", "aten.le.Scalar")]
    assert mask_ops and all(n.type.dtype.name == "bool" for n in mask_ops)
    assert "b8" not in str([i.type for i in captured.graph.inputs])
    _, program = lower(Rotary(), (torch.randn(LENGTH, WIDTH),))
    assert all(v.type.dtype.name != "bool" for v in program.inputs)


def test_a_mask_that_reads_a_constant_tensor_is_folded():
    table = torch.randn(5)
    captured = capture(lambda x: torch.where(table.unsqueeze(0) > 0, x, 0.0), (torch.randn(3, 5),))
    (constant,) = [i for i in captured.graph.inputs if i.kind == "constant"]
    assert constant.type.dtype.name == "bool"


def test_the_printed_graph_shows_the_folded_values_as_inputs():
    captured = captured_rotary()
    header = torch_ir.format_graph(captured.graph).splitlines()[0]
    for graph_input in captured.graph.inputs:
        assert f"{graph_input.name}: {graph_input.type}" in header
    assert f"f32[{LENGTH}, {WIDTH}]" in header


def test_the_folded_program_matches_eager_and_the_unfolded_one():
    module = Rotary()
    x = torch.randn(LENGTH, WIDTH)
    with torch.no_grad():
        expected = module(x)
    folded, folded_program = lower(module, (x,))
    assert_matches(run(folded, folded_program, (x,))[0], expected, "folded")
    unfolded = capture(module, (x,), fold=False)
    assert "aten.cos.default" in {n.target for n in unfolded.graph.nodes}
    assert "constant" not in [i.kind for i in unfolded.graph.inputs]
    unfolded_program = decompose(unfolded.graph, DECOMPOSITIONS)
    assert_matches(run(unfolded, unfolded_program, (x,))[0], expected, "unfolded")
    assert len(folded_program.ops) < len(unfolded_program.ops)


def test_parameters_and_persistent_buffers_are_never_folded():
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(5))
            self.register_buffer("offset", torch.randn(5))

        def forward(self, x):
            return x * self.weight.exp() + self.offset.cos()

    captured = capture(Scaled(), (torch.randn(3, 5),))
    assert {i.name: i.kind for i in captured.graph.inputs} == {"p_weight": "parameter", "b_offset": "buffer",
                                                              "x": "user"}
    assert {"aten.exp.default", "aten.cos.default"} <= {n.target for n in captured.graph.nodes}


def test_an_op_without_tensor_inputs_that_feeds_the_program_stays_an_op():
    captured = capture(lambda x: torch.arange(x.shape[-1]) * x, (torch.randn(4, 9),))
    assert [n.target for n in captured.graph.nodes] == ["aten.arange.start_step", "aten.mul.Tensor"]
    assert [i.kind for i in captured.graph.inputs] == ["user"]


def test_random_numbers_are_never_folded():
    captured = capture(lambda x: torch.rand(3).cos() + x, (torch.randn(3),))
    assert [n.target for n in captured.graph.nodes] == ["aten.rand.default", "aten.cos.default", "aten.add.Tensor"]


def test_a_lifted_tensor_constant_used_as_it_is_stays_a_constant_input():
    table = torch.randn(6)
    captured = capture(lambda x: x + table, (torch.randn(6),))
    (constant,) = [i for i in captured.graph.inputs if i.kind == "constant"]
    assert torch.equal(captured.constants[constant.name], table)


def test_equal_constants_are_one_input():
    class TwoLayers(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("table", torch.randn(6), persistent=False)

        def forward(self, x):
            first = x * self.table.cos().unsqueeze(0)
            return first + first * self.table.cos().unsqueeze(0)

    module = TwoLayers()
    x = torch.randn(3, 6)
    captured, program = lower(module, (x,))
    (constant,) = [i for i in captured.graph.inputs if i.kind == "constant"]
    assert torch.allclose(captured.constants[constant.name], module.table.cos().unsqueeze(0))
    assert_matches(run(captured, program, (x,))[0], module(x), "aliased")


def test_a_folded_mask_that_is_a_triangle_is_recognised_with_its_diagonal():
    square = torch.ones(6, 9, dtype=torch.bool)
    assert folding.triangle_of(square.tril(2)) == folding.Triangle(False, 2, (6, 9))
    assert folding.triangle_of(square.triu(-1).expand(2, 3, 6, 9)) == folding.Triangle(True, -1, (2, 3, 6, 9))
    stacked = torch.stack([square.tril(), square.tril(1)])
    for not_a_triangle in (square, ~square, torch.rand(6, 9) > 0.5, stacked, square[:1].tril()):
        assert folding.triangle_of(not_a_triangle) is None


def test_a_causal_mask_built_by_cumulative_sums_is_computed_from_coordinates():
    """``cumsum`` is no coordinate op, so the mask folds; its value is ``tril``, which the
    graph then computes instead of reading, and the matmul's blocks above the diagonal skip."""

    def scores(q, k):
        n = q.shape[0]
        causal = torch.ones(n, n).cumsum(-1) <= torch.arange(1, n + 1)[:, None]
        return torch.where(causal, q @ k.T, float("-inf")).softmax(-1)

    q, k = torch.randn(LENGTH, WIDTH), torch.randn(LENGTH, WIDTH)
    captured = capture(scores, (q, k))
    assert [i.kind for i in captured.graph.inputs] == ["user", "user"]
    (tril,) = [n for n in captured.graph.nodes if n.target == "aten.tril.default"]
    assert tril.args[1] == 0
    compiled = lamina.compile(scores, (q, k))
    assert "where(i1 - i0 <= 0" in compiled.ir("loop")
    assert_matches(compiled(q, k), scores(q, k), "triangle")

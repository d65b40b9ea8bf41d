"""Representative programs that schedules, fusion rules and backends are checked on.

Small shapes, most of them not multiples of any tile size, covering the kernel
classes lamina compiles: matmuls (ragged, batched, with epilogues), row reductions,
softmax, the softmax of attention scores, and elementwise chains with broadcasting
and transposed reads. Each is written as a Torch IR graph with fresh random inputs
and PyTorch's results.
"""

from __future__ import annotations

from typing import Callable

import torch

from lamina.testing.op_graph import GraphSample, GraphWriter, Value

Program = Callable[[GraphWriter], Value | tuple[Value, ...]]


def _inputs(w: GraphWriter, *shapes) -> list[Value]:
    return [w.input(torch.randn(shape)) for shape in shapes]


def matmul(w: GraphWriter):
    a, b = _inputs(w, (32, 48), (48, 40))
    return w.call("aten.mm.default", a, b)


def ragged_matmul(w: GraphWriter):
    """``relu((x + bias) @ w)``: a prologue and an epilogue around a contraction of ragged sizes."""
    x, bias, weight = _inputs(w, (17, 65), (65,), (65, 19))
    return w.call("aten.relu.default", w.call("aten.mm.default", w.call("aten.add.Tensor", x, bias), weight))


def batched_matmul(w: GraphWriter):
    a, b = _inputs(w, (3, 17, 20), (3, 20, 9))
    return w.call("aten.bmm.default", a, b)


def linear_silu(w: GraphWriter):
    x, weight, bias = _inputs(w, (9, 24), (13, 24), (13,))
    return w.call("aten.silu.default", w.call("aten.linear.default", x, weight, bias))


def row_sum(w: GraphWriter):
    (x,) = _inputs(w, (6, 37))
    return w.call("aten.sub.Tensor", w.call("aten.sum.dim_IntList", x, [1], True), x)


def softmax(w: GraphWriter):
    (x,) = _inputs(w, (5, 29))
    return w.call("aten._softmax.default", x, -1, False)


def mean_and_max(w: GraphWriter):
    (x,) = _inputs(w, (5, 3, 29))
    return w.call("aten.add.Tensor", w.call("aten.mean.dim", x, [-1]), w.call("aten.amax.default", x, [-1]))


def attention_scores(w: GraphWriter):
    """``softmax(q @ k^T * scale)``: a batched contraction whose rows a softmax reduces."""
    q, k = _inputs(w, (2, 19, 12), (2, 23, 12))
    scores = w.call("aten.bmm.default", q, w.call("aten.transpose.int", k, 1, 2))
    return w.call("aten._softmax.default", w.call("aten.mul.Tensor", scores, 12 ** -0.5), -1, False)


def elementwise(w: GraphWriter):
    """``exp(-(x - y)^2) / (1 + rsqrt(y * y + 1))`` with ``y`` broadcast along rows."""
    x, y = _inputs(w, (4, 33), (33,))
    d = w.call("aten.sub.Tensor", x, y)
    numerator = w.call("aten.exp.default", w.call("aten.neg.default", w.call("aten.mul.Tensor", d, d)))
    root = w.call("aten.rsqrt.default", w.call("aten.add.Tensor", w.call("aten.mul.Tensor", y, y), 1.0))
    return w.call("aten.div.Tensor", numerator, w.call("aten.add.Tensor", root, 1.0))


def transposed_elementwise(w: GraphWriter):
    x, y = _inputs(w, (7, 5), (7,))
    return w.call("aten.mul.Tensor", w.call("aten.transpose.int", x, 0, 1), y)


def transposed_copy(w: GraphWriter):
    """``2 * x.transpose(1, 2)``: a copy that reads its input across the rows it writes, of ragged sizes."""
    (x,) = _inputs(w, (2, 37, 45))
    return w.call("aten.mul.Tensor", w.call("aten.transpose.int", x, 1, 2), 2.0)


PROGRAMS: dict[str, Program] = {
    "matmul": matmul,
    "ragged_matmul": ragged_matmul,
    "batched_matmul": batched_matmul,
    "linear_silu": linear_silu,
    "row_sum": row_sum,
    "softmax": softmax,
    "mean_and_max": mean_and_max,
    "attention_scores": attention_scores,
    "elementwise": elementwise,
    "transposed_elementwise": transposed_elementwise,
    "transposed_copy": transposed_copy,
}
"""Every representative program, by the name that test ids use."""


def build_program(name: str) -> GraphSample:
    """The program ``name`` as a graph, with fresh inputs and PyTorch's results."""
    writer = GraphWriter()
    return writer.finish(PROGRAMS[name](writer))

"""The decomposition stage: the running example's Tensor IR, unsupported ops, faulty decompositions."""

from __future__ import annotations

import pytest
import torch

from lamina.core.errors import LaminaError, UnsupportedOpError
from lamina.core.ir import dtypes, tensor_ir
from lamina.core.ir.torch_ir import Graph, Input, Node, Ref, SourceLocation, TensorType
from lamina.core.stages.decompose import decompose
from lamina.plugins.ops.plugin import DECOMPOSITIONS
from tests.plugins.ops.lowering import assert_matches, lower, run

f32 = dtypes.float32


def running_example(x, bias, w):
    return torch.relu(torch.matmul(x + bias, w))


def test_running_example_prints_as_golden_tensor_ir():
    x, bias, w = torch.randn(16, 64), torch.randn(64), torch.randn(64, 16)
    captured, program = lower(running_example, (x, bias, w))
    assert tensor_ir.format_program(program) == (
        "tensor_program(x: f32[16, 64], bias: f32[64], w: f32[64, 16]):\n"
        "    add_rhs: f32[16, 64] = index_map (d0, d1) -> bias[d1]\n"
        "    add: f32[16, 64] = elementwise x + add_rhs\n"
        "    mm_lhs: f32[16, 64, 16] = index_map (d0, d1, d2) -> add[d0, d1]\n"
        "    mm_rhs: f32[16, 64, 16] = index_map (d0, d1, d2) -> w[d1, d2]\n"
        "    mm_mul: f32[16, 64, 16] = elementwise mm_lhs * mm_rhs\n"
        "    mm: f32[16, 16] = reduce sum(mm_mul, axes=[1])\n"
        "    relu: f32[16, 16] = elementwise max(mm, 0.0)\n"
        "    return (relu,)"
    )
    line = running_example.__code__.co_firstlineno + 1
    assert {(op.source.file, op.source.line) for op in program.ops} == {(__file__, line)}
    (result,) = run(captured, program, (x, bias, w))
    assert_matches(result, running_example(x, bias, w))


def test_linear_reads_its_weight_transposed_without_a_separate_op():
    _, program = lower(torch.nn.Linear(8, 4), (torch.randn(2, 8),))
    assert [tensor_ir.format_op(op) for op in program.ops] == [
        "linear_lhs: f32[2, 8, 4] = index_map (d0, d1, d2) -> input[d0, d1]",
        "linear_rhs: f32[2, 8, 4] = index_map (d0, d1, d2) -> p_weight[d2, d1]",
        "linear_mul: f32[2, 8, 4] = elementwise linear_lhs * linear_rhs",
        "linear_sum: f32[2, 4] = reduce sum(linear_mul, axes=[1])",
        "linear_bias: f32[2, 4] = index_map (d0, d1) -> p_bias[d1]",
        "linear: f32[2, 4] = elementwise linear_sum + linear_bias",
    ]


def uses_unsupported_ops(x):
    running = torch.cumprod(x, 0)
    across = torch.cumprod(x, 1)
    return running + across + torch.sort(x).values


def test_every_unsupported_op_is_listed_at_once_with_its_line():
    with pytest.raises(UnsupportedOpError) as raised:
        lower(uses_unsupported_ops, (torch.randn(3, 4),))
    first = uses_unsupported_ops.__code__.co_firstlineno
    assert [(op, where.split("  ")[0].rsplit(":", 1)[1]) for op, where in raised.value.ops] == [
        ("aten.cumprod.default", str(first + 1)),
        ("aten.cumprod.default", str(first + 2)),
        ("aten.sort.default", str(first + 3)),
    ]
    message = str(raised.value)
    assert "3 unsupported op(s)" in message
    assert "running = torch.cumprod(x, 0)" in message and "across = torch.cumprod(x, 1)" in message
    assert "lamina_register_ops" in message


SOURCE = SourceLocation("model.py", 7, "y = frobnicate(x)")


def one_node_graph(target: str = "aten.neg.default", dtype=f32) -> Graph:
    x = Input("x", TensorType((2, 3), f32))
    node = Node("y", target, (Ref("x"),), type=TensorType((2, 3), dtype), source=SOURCE)
    return Graph([x], [node], ["y"])


def test_a_crashing_decomposition_is_reported_with_the_op_the_node_and_the_line():
    def broken(b, node):
        raise ZeroDivisionError("division by zero")

    with pytest.raises(LaminaError) as raised:
        decompose(one_node_graph(), {"aten.neg.default": broken})
    message = str(raised.value)
    assert "aten.neg.default" in message and "node y" in message and "model.py:7" in message
    assert "ZeroDivisionError" in message


def test_a_decomposition_of_the_wrong_type_is_caught():
    graph = one_node_graph(dtype=dtypes.float16)
    with pytest.raises(LaminaError, match="produced f32\\[2, 3\\], but PyTorch computes f16\\[2, 3\\]"):
        decompose(graph, DECOMPOSITIONS)


def test_a_decomposition_must_return_a_value():
    with pytest.raises(LaminaError, match="returned 42"):
        decompose(one_node_graph(), {"aten.neg.default": lambda b, node: 42})


def test_graph_inputs_keep_their_kind_and_every_op_its_source():
    weight = Input("p_weight", TensorType((2, 3), f32), "parameter")
    node = Node("y", "aten.mul.Tensor", (Ref("x"), Ref("p_weight")), type=TensorType((2, 3), f32), source=SOURCE)
    graph = Graph([weight, Input("x", TensorType((2, 3), f32))], [node], ["y"])
    program = decompose(graph, DECOMPOSITIONS)
    assert [(v.name, v.kind) for v in program.inputs] == [("p_weight", "parameter"), ("x", "user")]
    assert [(op.name, op.source) for op in program.ops] == [("y", SOURCE)]

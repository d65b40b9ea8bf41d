"""Capturing PyTorch programs as Torch IR with torch.export."""

from __future__ import annotations

import pytest
import torch

import lamina
from lamina.core.errors import LaminaError
from lamina.core.ir import dtypes, torch_ir
from lamina.core.ir.torch_ir import Ref
from lamina.frontends.torch import DEFAULT_KEEP, capture
from lamina.frontends.torch.source import source_location


def running_example(x, bias, w):
    return torch.relu(torch.matmul(x + bias, w))


RUNNING_EXAMPLE_LINE = running_example.__code__.co_firstlineno + 1


def running_example_inputs():
    return torch.randn(16, 64), torch.randn(64), torch.randn(64, 16)


def test_running_example_prints_as_golden_torch_ir():
    captured = capture(running_example, running_example_inputs())
    line = RUNNING_EXAMPLE_LINE
    assert torch_ir.format_graph(captured.graph) == (
        "graph(x: f32[16, 64], bias: f32[64], w: f32[64, 16]):\n"
        f"    add: f32[16, 64] = aten.add.Tensor(x, bias)               # test_torch_capture.py:{line}\n"
        f"    mm: f32[16, 16] = aten.mm.default(add, w)                 # test_torch_capture.py:{line}\n"
        f"    relu: f32[16, 16] = aten.relu.default(mm)                 # test_torch_capture.py:{line}\n"
        "    return (relu,)"
    )
    source = captured.graph.nodes[0].source
    assert source.file == __file__
    assert source.code == "return torch.relu(torch.matmul(x + bias, w))"
    assert captured.user_input_positions == (0, 1, 2)
    assert captured.constants == {}


def test_a_lambda_keeps_its_argument_names_and_line():
    captured = capture(lambda left, right: left * right, (torch.randn(3), torch.randn(3)))
    assert [i.name for i in captured.graph.inputs] == ["left", "right"]
    (node,) = captured.graph.nodes
    assert node.source.line == test_a_lambda_keeps_its_argument_names_and_line.__code__.co_firstlineno + 1


def scaled(t):
    return t * 2


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)
        self.register_buffer("shift", torch.randn(4))
        self.scale = torch.randn(4)

    def forward(self, x, count, y):
        hidden = self.linear(x)
        return scaled(hidden) * self.scale + self.shift * count + y


def test_module_state_becomes_inputs_passed_at_run_time():
    module = Block()
    captured = capture(module, (torch.randn(3, 8), 3, torch.randn(4)), keep=())
    graph = captured.graph
    kinds = {i.name: i.kind for i in graph.inputs}
    assert kinds == {"p_linear_weight": "parameter", "p_linear_bias": "parameter", "b_shift": "buffer",
                     "c_scale": "constant", "x": "user", "y": "user"}
    positions = dict(zip((i.name for i in graph.inputs), captured.user_input_positions))
    assert positions == {"p_linear_weight": None, "p_linear_bias": None, "b_shift": None, "c_scale": None,
                         "x": 0, "y": 2}
    assert captured.constants["p_linear_weight"] is module.linear.weight
    assert torch.equal(captured.constants["b_shift"], module.shift)
    assert torch.equal(captured.constants["c_scale"], module.scale)
    assert [n.target for n in graph.nodes][:2] == ["aten.permute.default", "aten.addmm.default"]
    by_name = {n.name: n for n in graph.nodes}
    assert by_name["addmm"].args == (Ref("p_linear_bias"), Ref("x"), Ref("permute"))
    assert by_name["addmm"].source.code == "hidden = self.linear(x)"


def test_linear_is_kept_whole_by_default():
    captured = capture(torch.nn.Linear(8, 4), (torch.randn(2, 5, 8),))
    assert "aten.linear.default" in DEFAULT_KEEP
    (node,) = captured.graph.nodes
    assert node.target == "aten.linear.default"
    assert node.args == (Ref("input"), Ref("p_weight"), Ref("p_bias"))
    assert node.type == torch_ir.TensorType((2, 5, 4), dtypes.float32)
    assert [i.kind for i in captured.graph.inputs] == ["parameter", "parameter", "user"]


def test_dtypes_become_lamina_dtypes_and_allocation_details_are_dropped():
    captured = capture(lambda x: x.to(torch.float16) + torch.ones(3, dtype=torch.float16), (torch.randn(3),))
    by_target = {n.target: n for n in captured.graph.nodes}
    assert by_target["aten._to_copy.default"].kwargs == (("dtype", dtypes.float16),)
    assert by_target["aten.full.default"].kwargs == (("dtype", dtypes.float16),)
    assert by_target["aten.add.Tensor"].type == torch_ir.TensorType((3,), dtypes.float16)


def test_an_export_failure_is_reported_with_torch_s_reason():
    with pytest.raises(LaminaError, match="could not capture the program.*broadcast"):
        capture(lambda x, y: x + y, (torch.randn(3, 4), torch.randn(5)))


def test_data_dependent_shapes_are_refused_with_the_line():
    with pytest.raises(LaminaError, match=r"nonzero at .*test_torch_capture.py:\d+.*symbolic shape"):
        capture(lambda x: x.nonzero().float() * 2, (torch.randn(3, 4),))


def test_in_place_updates_of_inputs_are_refused():
    def bump(x):
        x.add_(1)
        return x * 2

    with pytest.raises(LaminaError, match="updates x in place"):
        capture(bump, (torch.randn(3),))


def test_a_keep_list_naming_no_aten_op_is_refused():
    with pytest.raises(LaminaError, match="not an ATen op"):
        capture(running_example, running_example_inputs(), keep=("aten.lineer.default",))


def test_example_inputs_must_be_tensors_or_numbers():
    with pytest.raises(LaminaError, match="example input 1 is a str"):
        capture(lambda x, name: x * 2, (torch.randn(2), "twice"))


def test_inputs_and_outputs_may_be_nested_in_lists_tuples_and_dicts():
    xs, scale = [torch.randn(3), torch.randn(3)], {"by": torch.randn(3)}
    f = lamina.compile(lambda xs, scale: {"sum": xs[0] + xs[1], "scaled": (xs[0] * scale["by"],)}, (xs, scale))
    out = f(xs, scale)
    assert set(out) == {"sum", "scaled"} and isinstance(out["scaled"], tuple)
    assert torch.allclose(out["sum"], xs[0] + xs[1]) and torch.allclose(out["scaled"][0], xs[0] * scale["by"])


def test_the_source_line_is_the_innermost_frame_of_user_code():
    torch_file = torch.__file__
    trace = (
        f'File "{torch_file}", line 10, in forward\n    return self.inner(x)\n'
        'File "/home/user/model.py", line 42, in forward\n    y = x @ w\n        ^^^^^\n'
        f'File "{torch_file}", line 20, in matmul\n    return impl(a, b)'
    )
    location = source_location(trace)
    assert (location.file, location.line, location.code) == ("/home/user/model.py", 42, "y = x @ w")
    assert source_location(None) is None
    assert source_location(f'File "{torch_file}", line 3, in f\n    pass') is None

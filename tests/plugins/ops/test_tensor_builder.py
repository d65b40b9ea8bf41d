"""The builder that decompositions program against: views, names, type promotion, matmul."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from lamina.backends.reference.interpreter import interpret
from lamina.backends.reference.scalar_ops import torch_dtype
from lamina.core.errors import LaminaError
from lamina.core.ir import dtypes, tensor_ir
from lamina.core.ir.tensor_builder import TensorBuilder
from lamina.core.ir.torch_ir import Input, Node, SourceLocation, TensorType

f32 = dtypes.float32


def builder(*shapes, dtype=f32, names="xyz", reserved=()) -> TensorBuilder:
    inputs = [Input(name, TensorType(shape, dtype)) for name, shape in zip(names, shapes)]
    return TensorBuilder(inputs, reserved)


def printed(b: TensorBuilder, name: str) -> str:
    op = next(o for o in b.ops if o.name == name)
    return tensor_ir.format_op(op).split(" = ", 1)[1]


@pytest.mark.parametrize("source, shape, expected", [
    ((2, 3, 4), (6, 4), "index_map (d0, d1) -> x[d0 // 3, d0 % 3, d1]"),
    ((6, 4), (2, 3, 4), "index_map (d0, d1, d2) -> x[d0 * 3 + d1, d2]"),
    ((3, 4), (1, 3, 1, 4), "index_map (d0, d1, d2, d3) -> x[d1, d3]"),
    ((2, 3, 4), (-1,), "index_map (d0) -> x[d0 // 12, d0 // 4 % 3, d0 % 4]"),
    ((4, 6), (3, 8), "index_map (d0, d1) -> x[(d0 * 8 + d1) // 6, (d0 * 8 + d1) % 6]"),
])
def test_views_print_as_plain_coordinates(source, shape, expected):
    b = builder(source)
    assert printed(b, b.reshape("x", shape)) == expected


def test_a_view_that_changes_nothing_is_the_value_itself():
    b = builder((3, 1, 4))
    assert b.reshape("x", (3, 1, 4)) == "x"
    assert b.permute("x", (0, 1, 2)) == "x"
    assert b.squeeze("x", 0) == "x"
    assert b.broadcast_to("x", (3, 1, 4)) == "x"
    assert b.ops == []


def _prime_factors(n: int) -> list[int]:
    factors, p = [], 2
    while n > 1:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    return factors


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([1, 2, 3, 4, 6]), max_size=4), st.randoms(use_true_random=False))
def test_reshape_reads_what_torch_reshape_reads(sizes, rng):
    primes = [p for s in sizes for p in _prime_factors(s)]
    rng.shuffle(primes)
    target: list[int] = []
    for p in primes:
        if target and rng.random() < 0.5:
            target[-1] *= p
        else:
            target.append(p)
        if rng.random() < 0.2:
            target.append(1)
    b = builder(tuple(sizes))
    program = b.program([b.reshape("x", target)])
    x = torch.randn(sizes)
    (result,) = interpret(program, {"x": x})
    assert torch.equal(result, x.reshape(target))


def test_a_view_of_a_view_reads_the_first_input_directly():
    b = builder((4, 5))
    transposed = b.transpose("x", 0, 1)
    expanded = b.broadcast_to(transposed, (2, 5, 4))
    program = b.program([expanded])
    assert [tensor_ir.format_op(op) for op in program.ops] == [
        f"{expanded}: f32[2, 5, 4] = index_map (d0, d1, d2) -> x[d2, d1]",
    ]


def test_results_take_the_node_name_and_intermediates_avoid_graph_names():
    b = builder((2, 3), (3, 4), names=["int", "w"], reserved=["mm", "mm_lhs", "relu"])
    assert [v.name for v in b.inputs] == ["int_", "w"]
    node = Node("mm", "aten.mm.default", ())
    with b.at(node):
        b.bind(node, b.matmul(b.value("int"), b.value("w")))
    assert b.value("mm") == "mm"
    assert [op.name for op in b.ops] == ["mm_lhs_1", "mm_rhs", "mm_mul", "mm"]
    assert b.ops[0].input == "int_"


def test_errors_say_which_node_and_line_they_come_from():
    b = builder((2, 3), (4,))
    node = Node("add", "aten.add.Tensor", (), source=SourceLocation("model.py", 12, "y = x + z"))
    with b.at(node), pytest.raises(LaminaError, match=r"add = aten.add.Tensor\(...\) at model.py:12.*do not broadcast"):
        b.binary("add", "x", "y")


DTYPES = [dtypes.bool_, dtypes.int32, dtypes.int64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]


OTHER_OPERANDS = [(d, rank) for d in DTYPES for rank in (0, 1)] + [(True, None), (2, None), (2.5, None)]


@pytest.mark.parametrize("left", DTYPES, ids=str)
@pytest.mark.parametrize("right, right_rank", OTHER_OPERANDS, ids=lambda v: str(v))
def test_type_promotion_follows_pytorch(left, right, right_rank):
    """Against ``torch.result_type``: a 0-d tensor or a Python number lifts the category, never the width."""
    inputs = [Input("x", TensorType((3,), left))]
    eager = [torch.zeros(3, dtype=torch_dtype(left))]
    if isinstance(right, dtypes.DType):
        inputs.append(Input("y", TensorType((3,) * right_rank, right)))
        eager.append(torch.zeros((3,) * right_rank, dtype=torch_dtype(right)))
        operands = ("x", "y")
    else:
        eager.append(right)
        operands = ("x", right)
    expected = str(torch.result_type(*eager)).removeprefix("torch.")
    assert TensorBuilder(inputs).result_type(*operands).name == expected


def test_half_precision_matmul_accumulates_in_float32():
    b = builder((5, 7), (7, 3), dtype=dtypes.float16)
    result = b.matmul("x", "y")
    kinds = [(type(op).__name__, op.type.dtype.name) for op in b.ops]
    assert kinds == [("IndexMap", "float16"), ("IndexMap", "float16"), ("Elementwise", "float32"),
                     ("Reduction", "float32"), ("Elementwise", "float16")]
    program = b.program([result])
    x, y = torch.randn(5, 7, dtype=torch.float16), torch.randn(7, 3, dtype=torch.float16)
    (out,) = interpret(program, {"x": x, "y": y})
    assert torch.allclose(out.float(), (x.float() @ y.float()), rtol=2e-3, atol=2e-3)


def test_ops_that_no_output_needs_are_dropped():
    b = builder((3,))
    kept = b.unary("exp", "x")
    b.unary("log", "x")
    assert [op.name for op in b.program([kept]).ops] == [kept]


def test_a_view_of_a_gather_is_one_index_map_that_keeps_the_gathered_tensor():
    b = TensorBuilder([Input("table", TensorType((37, 8), f32)), Input("ids", TensorType((3, 5), dtypes.int64)),
                       Input("more", TensorType((2,), dtypes.int32))])
    d = tensor_ir.output_vars(3)
    rows = b.index_map("table", [tensor_ir.Gathered(0, d[:2]), d[2]], (3, 5, 8), gathers=["ids"])
    picked = b.index_map(rows, [d[0], tensor_ir.Gathered(0, (d[1],)), d[2]], (3, 2, 8), gathers=["more"])
    flipped = b.transpose(picked, 0, 2)
    assert printed(b, flipped) == "index_map (d0, d1, d2) -> table[ids[d2, more[d1]], d0]"
    program = b.program([flipped])
    (op,) = program.ops
    assert op.gathers == ("more", "ids")
    table, ids, more = torch.randn(37, 8), torch.randint(0, 37, (3, 5)), torch.randint(0, 5, (2,), dtype=torch.int32)
    (out,) = interpret(program, {"table": table, "ids": ids, "more": more})
    assert torch.equal(out, table[ids[:, more.long()]].transpose(0, 2))


def test_gathered_indices_must_be_integers():
    b = builder((4, 3), (2,))
    with pytest.raises(LaminaError, match="indices must be integers"):
        b.index_map("x", [tensor_ir.Gathered(0, tensor_ir.output_vars(1)), 0], (2,), gathers=["y"])


def test_concat_reads_each_part_where_it_lands_and_picks_by_coordinate():
    b = builder((2, 3), (2, 4))
    cat = b.concat(["x", "y"], 1)
    assert printed(b, cat) == "elementwise where(d1 < 3, part, part_1)"
    assert printed(b, "part") == "index_map (d0, d1) -> x[d0, d1 % 3]"
    assert printed(b, "part_1") == "index_map (d0, d1) -> y[d0, (d1 + 1) % 4]"
    x, y = torch.randn(2, 3), torch.randn(2, 4)
    (out,) = interpret(b.program([cat]), {"x": x, "y": y})
    assert torch.equal(out, torch.cat([x, y], 1))


def test_arange_and_cumsum_are_functions_of_coordinates():
    b = builder((4, 6))
    positions = b.arange(2, 3, 6, dtypes.int64)
    running = b.cumsum("x", 1)
    assert printed(b, positions) == "elementwise d0 * 3 + 2"
    x = torch.randn(4, 6)
    got_positions, got_running = interpret(b.program([positions, running]), {"x": x})
    assert torch.equal(got_positions, torch.arange(2, 20, 3))
    assert torch.allclose(got_running, x.cumsum(1), atol=1e-6)

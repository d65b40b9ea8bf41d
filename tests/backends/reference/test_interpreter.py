"""The Tensor IR interpreter on programs written by hand, against PyTorch."""

from __future__ import annotations

import pytest
import torch

from lamina.backends.reference.interpreter import interpret
from lamina.core.errors import InputMismatchError, LaminaError
from lamina.core.ir import dtypes, expr as ex, tensor_ir as T
from lamina.core.ir.torch_ir import TensorType

f32, i64 = dtypes.float32, dtypes.int64


def t(*shape, dtype=f32) -> TensorType:
    return TensorType(shape, dtype)


def program(inputs: dict[str, TensorType], ops: list, outputs: list[str]) -> T.Program:
    result = T.Program([T.Value(n, ty) for n, ty in inputs.items()], ops, outputs)
    T.verify_program(result)
    return result


def test_elementwise_evaluates_the_whole_expression_with_constants():
    a, b = T.Arg(0, f32), T.Arg(1, f32)
    fn = ex.op("where", ex.op("gt", a, 0.0), ex.op("mul", ex.op("exp", b), 2.0), ex.op("sub", a, b))
    p = program({"x": t(5, 7), "y": t(5, 7)}, [T.Elementwise("z", ["x", "y"], fn, t(5, 7))], ["z"])
    x, y = torch.randn(5, 7), torch.randn(5, 7)
    (z,) = interpret(p, {"x": x, "y": y})
    assert torch.allclose(z, torch.where(x > 0, y.exp() * 2, x - y), rtol=1e-6)


def test_an_elementwise_op_without_inputs_fills_its_shape():
    p = program({}, [T.Elementwise("fill", [], ex.Const(1.5, f32), t(2, 3))], ["fill"])
    (fill,) = interpret(p, {})
    assert torch.equal(fill, torch.full((2, 3), 1.5))


def test_casts_and_comparisons_produce_their_types():
    fn = ex.cast(ex.op("ge", T.Arg(0, f32), 0.0), i64)
    p = program({"x": t(9)}, [T.Elementwise("positive", ["x"], fn, t(9, dtype=i64))], ["positive"])
    x = torch.randn(9)
    (positive,) = interpret(p, {"x": x})
    assert torch.equal(positive, (x >= 0).to(torch.int64))


@pytest.mark.parametrize("op, reference", [
    ("sum", lambda x, axes, keep: x.sum(axes, keepdim=keep)),
    ("max", lambda x, axes, keep: x.amax(axes, keepdim=keep)),
    ("min", lambda x, axes, keep: x.amin(axes, keepdim=keep)),
    ("prod", lambda x, axes, keep: x.log().sum(axes, keepdim=keep).exp()),
])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reductions_over_several_axes(op, reference, keepdim):
    axes = (0, 2)
    out_shape = (1, 6, 1) if keepdim else (6,)
    p = program({"x": t(5, 6, 7)}, [T.Reduction("r", "x", axes, op, keepdim, t(*out_shape))], ["r"])
    x = torch.rand(5, 6, 7) + 0.5
    (r,) = interpret(p, {"x": x})
    expected = reference(x, axes, keepdim)
    assert r.shape == expected.shape
    assert torch.allclose(r, expected, rtol=1e-5)


def test_an_index_map_gathers_through_divisions_and_remainders():
    d0, d1 = T.output_vars(2)
    view = T.IndexMap("v", "x", [d0 // 3, d0 % 3, d1], t(6, 4))
    transpose = T.IndexMap("tr", "v", [d1, d0], t(4, 6))
    broadcast = T.IndexMap("b", "x", [ex.const(1), ex.const(0), d1], t(3, 4))
    p = program({"x": t(2, 3, 4)}, [view, transpose, broadcast], ["v", "tr", "b"])
    x = torch.randn(2, 3, 4)
    v, tr, b = interpret(p, {"x": x})
    assert torch.equal(v, x.reshape(6, 4))
    assert torch.equal(tr, x.reshape(6, 4).t())
    assert torch.equal(b, x[1, 0].expand(3, 4))


def test_an_index_map_of_a_scalar_broadcasts_it():
    p = program({"s": t()}, [T.IndexMap("b", "s", [], t(2, 5))], ["b"])
    s = torch.randn(())
    (b,) = interpret(p, {"s": s})
    assert torch.equal(b, s.expand(2, 5))


def test_an_index_outside_the_input_is_an_error_not_a_wraparound():
    (d0,) = T.output_vars(1)
    shifted = T.Program([T.Value("x", t(4))], [T.IndexMap("y", "x", [d0 - 1], t(4))], ["y"])
    with pytest.raises(LaminaError, match=r"y reads x at coordinate 0 = d0 - 1, which reaches \[-1, 2\]"):
        interpret(shifted, {"x": torch.randn(4)})


def test_inputs_are_checked_against_the_program():
    p = program({"x": t(3)}, [T.Elementwise("y", ["x"], ex.op("neg", T.Arg(0, f32)), t(3))], ["y"])
    with pytest.raises(InputMismatchError, match="no tensor given for program input x"):
        interpret(p, {})
    with pytest.raises(InputMismatchError, match=r"x is f32\[3\], but the tensor given is float64\[3\]"):
        interpret(p, {"x": torch.randn(3, dtype=torch.float64)})


def test_a_matmul_written_as_primitives_matches_torch():
    d0, d1, d2 = T.output_vars(3)
    ops = [
        T.IndexMap("lhs", "a", [d0, d1], t(17, 65, 19)),
        T.IndexMap("rhs", "b", [d1, d2], t(17, 65, 19)),
        T.Elementwise("product", ["lhs", "rhs"], ex.op("mul", T.Arg(0, f32), T.Arg(1, f32)), t(17, 65, 19)),
        T.Reduction("mm", "product", [1], "sum", False, t(17, 19)),
    ]
    p = program({"a": t(17, 65), "b": t(65, 19)}, ops, ["mm"])
    a, b = torch.randn(17, 65), torch.randn(65, 19)
    (mm,) = interpret(p, {"a": a, "b": b})
    expected = a @ b
    assert float((mm - expected).abs().max() / expected.abs().max()) < 1e-5


def test_coordinates_of_an_elementwise_output_are_its_grid():
    fn = ex.op("where", ex.op("le", T.Coord(1), T.Coord(0)), T.Arg(0, f32), ex.op("mul", ex.cast(T.Coord(1), f32), 0.5))
    p = program({"x": t(6, 9)}, [T.Elementwise("lower", ["x"], fn, t(6, 9))], ["lower"])
    x = torch.randn(6, 9)
    (lower,) = interpret(p, {"x": x})
    rows, cols = torch.meshgrid(torch.arange(6), torch.arange(9), indexing="ij")
    assert torch.equal(lower, torch.where(cols <= rows, x, cols.float() * 0.5))


def test_a_coordinate_alone_fills_an_arange():
    p = program({}, [T.Elementwise("positions", [], T.Coord(0) * 3 + 2, t(11, dtype=i64))], ["positions"])
    (positions,) = interpret(p, {})
    assert torch.equal(positions, torch.arange(2, 35, 3))


def test_gathered_indices_read_rows_of_a_table():
    d = T.output_vars(3)
    lookup = T.IndexMap("rows", "table", [T.Gathered(0, d[:2]), d[2]], t(4, 7, 19), gathers=["ids"])
    p = program({"table": t(37, 19), "ids": t(4, 7, dtype=i64)}, [lookup], ["rows"])
    table, ids = torch.randn(37, 19), torch.randint(0, 37, (4, 7))
    (rows,) = interpret(p, {"table": table, "ids": ids})
    assert torch.equal(rows, table[ids])


def test_gathered_indices_of_a_narrow_type_read_at_any_index_expression():
    d = T.output_vars(2)
    found = T.Gathered(0, (ex.const(0), d[1] // 2))
    index = [d[0], ex.op("where", ex.op("lt", found, 0), found + 5, found)]
    pick = T.IndexMap("picked", "x", index, t(3, 8), gathers=["ids"])
    p = program({"x": t(3, 5), "ids": t(1, 4, dtype=dtypes.int32)}, [pick], ["picked"])
    x, ids = torch.randn(3, 5), torch.randint(-5, 5, (1, 4), dtype=torch.int32)
    (picked,) = interpret(p, {"x": x, "ids": ids})
    assert torch.equal(picked, x[:, ids[0].long().repeat_interleave(2)])


def test_a_gathered_index_outside_the_input_is_an_error():
    d = T.output_vars(1)
    lookup = T.IndexMap("rows", "table", [T.Gathered(0, d[:1])], t(3), gathers=["ids"])
    p = program({"table": t(4), "ids": t(3, dtype=i64)}, [lookup], ["rows"])
    with pytest.raises(LaminaError, match="rows reads table at coordinate 0"):
        interpret(p, {"table": torch.randn(4), "ids": torch.tensor([0, 4, 1])})

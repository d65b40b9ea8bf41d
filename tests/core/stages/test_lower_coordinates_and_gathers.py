"""Output coordinates and gathered indices of Tensor IR, lowered to Loop IR."""

from __future__ import annotations

from lamina.core.ir import dtypes, expr as ex, loop_ir, tensor_ir as T
from lamina.core.ir.torch_ir import TensorType
from lamina.core.stages.lower_to_loops import lower_to_loops

f32, i32, i64 = dtypes.float32, dtypes.int32, dtypes.int64


def lowered(inputs: dict[str, TensorType], ops: list, outputs: list[str]) -> loop_ir.Program:
    program = T.Program([T.Value(n, ty) for n, ty in inputs.items()], ops, outputs)
    T.verify_program(program)
    return lower_to_loops(program)


def test_a_coordinate_becomes_the_loop_variable_of_its_axis():
    fn = ex.op("where", ex.op("le", T.Coord(1), T.Coord(0)), T.Arg(0, f32), ex.Const(0.0, f32))
    program = lowered({"x": TensorType((5, 7), f32)}, [T.Elementwise("tril", ["x"], fn, TensorType((5, 7), f32))],
                      ["tril"])
    assert loop_ir.format_kernel(program.kernels[0]) == (
        "kernel tril(x: f32[5, 7]) -> (tril: f32[5, 7]):\n"
        "  for i0 in parallel(5):\n"
        "    for i1 in parallel(7):\n"
        "      tril[i0, i1] = where(i1 <= i0, x[i0, i1], 0.0)"
    )


def test_an_elementwise_of_coordinates_alone_reads_no_buffer():
    positions = T.Elementwise("positions", [], ex.cast(T.Coord(0) * 2 + 1, i32), TensorType((9,), i32))
    program = lowered({}, [positions], ["positions"])
    (kernel,) = program.kernels
    assert kernel.inputs == ()
    assert loop_ir.format_kernel(kernel).splitlines()[-1].strip() == "positions[i0] = i32(i0 * 2 + 1)"


def test_a_gathered_index_becomes_a_load_of_its_tensor_cast_to_the_index_type():
    d = T.output_vars(3)
    lookup = T.IndexMap("rows", "table", [T.Gathered(0, d[:2]), d[2]], TensorType((2, 3, 8), f32), gathers=["ids"])
    program = lowered({"table": TensorType((50, 8), f32), "ids": TensorType((2, 3), i32)}, [lookup], ["rows"])
    (kernel,) = program.kernels
    assert [b.name for b in kernel.inputs] == ["table", "ids"]
    assert loop_ir.format_kernel(kernel).splitlines()[-1].strip() == "rows[i0, i1, i2] = table[i64(ids[i0, i1]), i2]"


def test_an_int64_gathered_index_needs_no_cast_and_may_count_from_the_end():
    d = T.output_vars(1)
    found = T.Gathered(0, (d[0],))
    index = [ex.op("where", ex.op("lt", found, 0), found + 6, found)]
    pick = T.IndexMap("picked", "x", index, TensorType((4,), f32), gathers=["ids"])
    program = lowered({"x": TensorType((6,), f32), "ids": TensorType((4,), i64)}, [pick], ["picked"])
    assert loop_ir.format_kernel(program.kernels[0]).splitlines()[-1].strip() == "picked[i0] = x[where(ids[i0] < 0, ids[i0] + 6, ids[i0])]"

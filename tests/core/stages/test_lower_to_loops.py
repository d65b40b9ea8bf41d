import pytest

from lamina.core.errors import LaminaError
from lamina.core.ir import dtypes, expr as ex, loop_ir, tensor_ir as T
from lamina.core.ir.torch_ir import TensorType
from lamina.core.stages.lower_to_loops import kernel_name, lower_to_loops
from tests.core.stages import tensor_programs as tp

RUNNING_EXAMPLE_LOOPS = """\
loop_program(x: f32[16, 64], bias: f32[64], w: f32[64, 16]) -> (relu: f32[16, 16]):
  buffer expand: f32[16, 64]
  buffer add: f32[16, 64]
  buffer expand_1: f32[16, 64, 16]
  buffer expand_2: f32[16, 64, 16]
  buffer mul: f32[16, 64, 16]
  buffer sum: f32[16, 16]
  kernel expand(bias: f32[64]) -> (expand: f32[16, 64]):
    for i0 in parallel(16):
      for i1 in parallel(64):
        expand[i0, i1] = bias[i1]
  kernel add(x: f32[16, 64], expand: f32[16, 64]) -> (add: f32[16, 64]):
    for i0 in parallel(16):
      for i1 in parallel(64):
        add[i0, i1] = x[i0, i1] + expand[i0, i1]
  kernel expand_1(add: f32[16, 64]) -> (expand_1: f32[16, 64, 16]):
    for i0 in parallel(16):
      for i1 in parallel(64):
        for i2 in parallel(16):
          expand_1[i0, i1, i2] = add[i0, i1]
  kernel expand_2(w: f32[64, 16]) -> (expand_2: f32[16, 64, 16]):
    for i0 in parallel(16):
      for i1 in parallel(64):
        for i2 in parallel(16):
          expand_2[i0, i1, i2] = w[i1, i2]
  kernel mul(expand_1: f32[16, 64, 16], expand_2: f32[16, 64, 16]) -> (mul: f32[16, 64, 16]):
    for i0 in parallel(16):
      for i1 in parallel(64):
        for i2 in parallel(16):
          mul[i0, i1, i2] = expand_1[i0, i1, i2] * expand_2[i0, i1, i2]
  kernel sum(mul: f32[16, 64, 16]) -> (sum: f32[16, 16]):
    for i0 in parallel(16):
      for i1 in parallel(16):
        acc0: f32 = 0.0
        for r0 in reduce(64):
          acc0 += mul[i0, r0, i1]
        sum[i0, i1] = acc0
  kernel relu(sum: f32[16, 16]) -> (relu: f32[16, 16]):
    for i0 in parallel(16):
      for i1 in parallel(16):
        relu[i0, i1] = max(sum[i0, i1], 0.0)"""


def test_running_example_lowers_to_one_kernel_per_op():
    assert loop_ir.format_program(lower_to_loops(tp.running_example())) == RUNNING_EXAMPLE_LOOPS


def test_zero_input_elementwise_is_a_fill():
    b = tp.TensorProgramBuilder()
    x = b.input("x", 3, 4)
    full = b.fill("full", 0.5, (3, 4))
    program = lower_to_loops(b.program(b.elementwise("add", tp.add, x, full)))
    assert loop_ir.format_kernel(program.kernels[0]) == (
        "kernel full() -> (full: f32[3, 4]):\n"
        "  for i0 in parallel(3):\n"
        "    for i1 in parallel(4):\n"
        "      full[i0, i1] = 0.5"
    )


def test_index_map_indices_are_simplified_with_the_loop_ranges():
    b = tp.TensorProgramBuilder()
    x = b.input("x", 6, 20)
    flat = b.index_map(x, (120,), lambda d: (d[0] // 20, d[0] % 20), base="view")
    back = b.index_map(flat, (6, 20), lambda d: (d[0] * 20 + d[1],), base="view")
    program = lower_to_loops(b.program(back))
    assert loop_ir.format_kernel(program.kernels[0]).splitlines()[-1].strip() == "view[i0] = x[i0 // 20, i0 % 20]"
    assert loop_ir.format_kernel(program.kernels[1]).splitlines()[-1].strip() == "view_1[i0, i1] = view[i0 * 20 + i1]"


def test_reduction_with_keepdim_stores_at_zero_on_the_reduced_axes():
    b = tp.TensorProgramBuilder()
    x = b.input("x", 4, 5, 6)
    program = lower_to_loops(b.program(b.reduce(x, (0, 2), "max", keepdim=True)))
    assert loop_ir.format_kernel(program.kernels[0]) == (
        "kernel max(x: f32[4, 5, 6]) -> (max: f32[1, 5, 1]):\n"
        "  for i0 in parallel(5):\n"
        "    acc0: f32 = -inf\n"
        "    for r0 in reduce(4):\n"
        "      for r1 in reduce(6):\n"
        "        acc0 = max(acc0, x[r0, i0, r1])\n"
        "    max[0, i0, 0] = acc0"
    )


def test_neighbouring_reduced_axes_are_one_loop_in_row_major_order():
    """``mean`` over an image's height and width: one row of ``h * w`` per channel, as a schedule
    of rows takes it; axes that are not neighbours keep a loop each."""
    b = tp.TensorProgramBuilder()
    x = b.input("x", 2, 3, 5, 7)
    program = lower_to_loops(b.program(b.reduce(x, (0, 2, 3), "sum")))
    assert loop_ir.format_kernel(program.kernels[0]) == (
        "kernel sum(x: f32[2, 3, 5, 7]) -> (sum: f32[3]):\n"
        "  for i0 in parallel(3):\n"
        "    acc0: f32 = 0.0\n"
        "    for r0 in reduce(2):\n"
        "      for r1 in reduce(35):\n"
        "        acc0 += x[r0, i0, r1 // 7, r1 % 7]\n"
        "    sum[i0] = acc0"
    )


def test_full_reduction_has_no_parallel_loop():
    b = tp.TensorProgramBuilder()
    x = b.input("x", 7)
    program = lower_to_loops(b.program(b.reduce(x, (0,), "prod")))
    assert loop_ir.format_kernel(program.kernels[0]) == (
        "kernel prod(x: f32[7]) -> (prod: f32[]):\n"
        "  acc0: f32 = 1.0\n"
        "  for r0 in reduce(7):\n"
        "    acc0 *= x[r0]\n"
        "  prod[] = acc0"
    )


def test_buffers_are_split_into_inputs_outputs_and_temporaries():
    program = lower_to_loops(tp.running_example())
    assert [b.name for b in program.inputs] == ["x", "bias", "w"]
    assert [b.name for b in program.outputs] == ["relu"]
    assert [b.name for b in program.temporaries] == ["expand", "add", "expand_1", "expand_2", "mul", "sum"]
    assert [k.name for k in program.kernels] == ["expand", "add", "expand_1", "expand_2", "mul", "sum", "relu"]


def test_an_output_that_is_an_input_or_repeats_gets_a_copy_kernel():
    b = tp.TensorProgramBuilder()
    x = b.input("x", 2, 3)
    doubled = b.elementwise("double", lambda a: tp.mul(a, 2.0), x)
    program = lower_to_loops(b.program(x, doubled, doubled))
    assert [o.name for o in program.outputs] == ["x_copy", "double", "double_copy"]
    assert [k.name for k in program.kernels] == ["double", "x_copy", "double_copy"]
    assert loop_ir.format_kernel(program.kernels[1]).splitlines()[-1].strip() == "x_copy[i0, i1] = x[i0, i1]"
    assert program.temporaries == ()


def test_an_input_read_twice_is_one_kernel_input():
    b = tp.TensorProgramBuilder()
    x = b.input("x", 3)
    program = lower_to_loops(b.program(b.elementwise("square", tp.mul, x, x)))
    assert [i.name for i in program.kernels[0].inputs] == ["x"]


def test_loop_variables_skip_names_that_buffers_use():
    b = tp.TensorProgramBuilder()
    i0 = b.input("i0", 3, 4)
    acc0 = b.input("acc0", 3, 4)
    total = b.reduce(b.elementwise("r0", tp.add, i0, acc0), (1,), "sum")
    program = lower_to_loops(b.program(total))
    text = loop_ir.format_kernel(program.kernels[1])
    assert text == (
        "kernel sum(r0: f32[3, 4]) -> (sum: f32[3]):\n"
        "  for i1 in parallel(3):\n"
        "    acc1: f32 = 0.0\n"
        "    for r1 in reduce(4):\n"
        "      acc1 += r0[i1, r1]\n"
        "    sum[i1] = acc1"
    )


def test_kernel_names_are_c_identifiers():
    assert kernel_name("add") == "add"
    assert kernel_name("layer.0/add") == "layer_0_add"
    assert kernel_name("0") == "k_0"


@pytest.mark.parametrize(
    "dtype, op, identity",
    [
        (dtypes.int32, "min", 2**31 - 1),
        (dtypes.int32, "max", -(2**31)),
        (dtypes.int64, "max", -(2**63)),
        (dtypes.int64, "sum", 0),
        (dtypes.bool_, "max", False),
        (dtypes.bool_, "min", True),
        (dtypes.float16, "max", float("-inf")),
    ],
)
def test_reductions_start_from_an_identity_their_dtype_can_hold(dtype, op, identity):
    b = tp.TensorProgramBuilder(dtype=dtype)
    x = b.input("x", 4, 3)
    program = lower_to_loops(b.program(b.reduce(x, (1,), op)))
    init = next(s for s in loop_ir.statements(program.kernels[0].body) if isinstance(s, loop_ir.Init))
    assert init.value == ex.Const(identity, dtype)


def test_unknown_input_is_reported():
    f32 = dtypes.float32
    program = T.Program(
        [T.Value("x", TensorType((2,), f32))],
        [T.Elementwise("y", ("nope",), T.Arg(0, f32), TensorType((2,), f32))],
        ["y"],
    )
    with pytest.raises(LaminaError, match="y reads nope"):
        lower_to_loops(program)


@pytest.mark.parametrize("case", tp.CASES, ids=lambda c: c.id)
def test_every_case_lowers_to_verified_loop_ir(case):
    program = lower_to_loops(case.program)
    loop_ir.verify_program(program)
    assert len(program.kernels) == len(case.program.ops)


def test_kernel_inputs_follow_the_order_of_first_load():
    b = tp.TensorProgramBuilder()
    x, y, unused = b.input("x", 3), b.input("y", 3), b.input("unused", 3)
    program = lower_to_loops(b.program(b.elementwise("sub", lambda a, c, u: ex.op("sub", c, a), x, y, unused)))
    assert [i.name for i in program.kernels[0].inputs] == ["y", "x"]

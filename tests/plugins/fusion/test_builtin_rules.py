import attrs
import pytest

from lamina.backends.cuda.targets import SM90 as SM_90
from lamina.core.ir import dtypes, expr as ex, loop_ir
from lamina.core.ir.torch_ir import TensorType
from lamina.core.stages.fuse import fuse
from lamina.core.stages.lower_to_loops import lower_to_loops
from lamina.plugins.fusion import (
    FuseEpilogueIntoReduction, FuseReadersFunctionIntoReduction, InlinePointwiseProducers, RemoveDeadBuffers,
)
from lamina.plugins.fusion import plugin
from lamina.plugins.fusion.analysis import MAX_EXPRESSION_NODES
from tests.core.stages import tensor_programs as tp


RUNNING_EXAMPLE_FUSED = """\
loop_program(x: f32[16, 64], bias: f32[64], w: f32[64, 16]) -> (relu: f32[16, 16]):
  kernel relu(x: f32[16, 64], bias: f32[64], w: f32[64, 16]) -> (relu: f32[16, 16]):
    for i0 in parallel(16):
      for i1 in parallel(16):
        acc0: f32 = 0.0
        for r0 in reduce(64):
          acc0 += (x[i0, r0] + bias[r0]) * w[r0, i1]
        relu[i0, i1] = max(acc0, 0.0)"""


def builtin_rules():
    rules = []
    plugin.lamina_register_fusion_rules(rules.append)
    return sorted(rules, key=lambda r: (-r.priority, r.name))


def fused(program):
    return fuse(lower_to_loops(program), builtin_rules(), SM_90, {})


def reduce_loops(program):
    return [s for k in program.kernels for s in loop_ir.statements(k.body) if isinstance(s, loop_ir.Loop) and s.kind == "reduce"]


def test_plugin_registers_inlining_before_epilogue_fusion_before_cleanup():
    assert [r.name for r in builtin_rules()] == [
        "store_widened_temporaries_narrow",
        "inline_pointwise_producers",
        "fuse_epilogue_into_reduction",
        "fuse_reduction_into_consumer",
        "store_output_in_consumer",
        "fuse_readers_function_into_reduction",
        "store_narrowed_temporaries",
        "mark_unread_elements",
        "remove_dead_buffers",
    ]


def test_running_example_becomes_one_kernel_without_temporaries():
    program = fused(tp.running_example())
    assert loop_ir.format_program(program) == RUNNING_EXAMPLE_FUSED
    assert program.temporaries == ()


def test_inlining_alone_leaves_reduction_and_epilogue():
    program = fuse(lower_to_loops(tp.running_example()), [InlinePointwiseProducers()], SM_90, {})
    assert [k.name for k in program.kernels] == ["sum", "relu"]
    assert [b.name for b in program.temporaries] == ["sum"]
    assert loop_ir.format_kernel(program.kernels[0]).splitlines()[5].strip() == "acc0 += (x[i0, r0] + bias[r0]) * w[r0, i1]"


def test_inlined_views_are_simplified_with_the_consumer_ranges():
    b = tp.TensorProgramBuilder()
    x = b.input("x", 6, 20)
    flat = b.index_map(x, (120,), lambda d: (d[0] // 20, d[0] % 20), base="view")
    back = b.index_map(flat, (6, 20), lambda d: (d[0] * 20 + d[1],), base="view")
    program = fused(b.program(b.elementwise("double", lambda a: tp.mul(a, 2.0), back)))
    assert loop_ir.format_kernel(program.kernels[0]).splitlines()[-1].strip() == "double[i0, i1] = x[i0, i1] * 2.0"


def test_a_reduction_used_twice_is_computed_once():
    b = tp.TensorProgramBuilder()
    x = b.input("x", 4, 8)
    total = b.reduce(x, (1,), "sum")
    doubled = b.elementwise("double", lambda a: tp.mul(a, 2.0), total)
    shifted = b.elementwise("shift", lambda a: tp.add(a, 1.0), total)
    program = fused(b.program(doubled, shifted))
    assert [k.name for k in program.kernels] == ["double", "shift"]
    assert [[b.name for b in k.outputs] for k in program.kernels] == [["sum", "double"], ["shift"]]
    assert [b.name for b in program.temporaries] == ["sum"]
    assert [b.name for b in program.kernels[1].inputs] == ["sum"]
    assert len(reduce_loops(program)) == 1


def test_a_reduction_read_through_a_broadcast_runs_once_per_row_inside_its_reader():
    program = fused(tp.sum_keepdim_minus_input())
    assert loop_ir.format_program(program) == (
        "loop_program(x: f32[6, 37]) -> (sub: f32[6, 37]):\n"
        "  kernel sub(x: f32[6, 37]) -> (sub: f32[6, 37]):\n"
        "    for i0 in parallel(6):\n"
        "      acc0: f32 = 0.0\n"
        "      for r0 in reduce(37):\n"
        "        acc0 += x[i0, r0]\n"
        "      for i1 in serial(37):\n"
        "        sub[i0, i1] = acc0 - x[i0, i1]"
    )


def test_a_program_output_is_never_removed_and_its_reader_stores_it():
    b = tp.TensorProgramBuilder()
    x = b.input("x", 5)
    doubled = b.elementwise("double", lambda a: tp.mul(a, 2.0), x)
    shifted = b.elementwise("shift", lambda a: tp.add(a, 1.0), doubled)
    program = fused(b.program(doubled, shifted))
    assert [o.name for o in program.outputs] == ["double", "shift"]
    assert loop_ir.format_program(program).splitlines()[1:] == [
        "  kernel shift(x: f32[5]) -> (double: f32[5], shift: f32[5]):",
        "    for i0 in parallel(5):",
        "      double[i0] = x[i0] * 2.0",
        "      shift[i0] = x[i0] * 2.0 + 1.0",
    ]


def test_an_output_that_nothing_reads_stays():
    b = tp.TensorProgramBuilder()
    x = b.input("x", 5)
    total = b.reduce(x, (0,), "sum")
    program = fused(b.program(x, total))
    assert [k.name for k in program.kernels] == ["sum", "x_copy"]


def test_mean_fuses_its_scale_into_the_sum():
    program = fused(tp.mean())
    assert loop_ir.format_program(program) == (
        "loop_program(x: f32[5, 8]) -> (mean: f32[5]):\n"
        "  kernel mean(x: f32[5, 8]) -> (mean: f32[5]):\n"
        "    for i0 in parallel(5):\n"
        "      acc0: f32 = 0.0\n"
        "      for r0 in reduce(8):\n"
        "        acc0 += x[i0, r0]\n"
        "      mean[i0] = acc0 * 0.125"
    )


def test_keepdim_epilogue_fuses_and_stores_at_zero():
    program = fused(tp.mean((3, 4, 8), keepdim=True))
    assert len(program.kernels) == 1
    assert loop_ir.format_kernel(program.kernels[0]).splitlines()[-1].strip() == "mean[i0, i1, 0] = acc0 * 0.125"


def test_epilogue_with_other_inputs_takes_the_epilogue_place_and_the_other_reduction():
    program = fused(tp.two_reductions_one_epilogue())
    assert [k.name for k in program.kernels] == ["add"]
    (add,) = program.kernels
    assert [b.name for b in add.inputs] == ["y", "x"]
    assert [s.acc for s in loop_ir.statements(add.body) if isinstance(s, loop_ir.Init)] == ["acc0", "acc1"]
    assert loop_ir.format_kernel(add).splitlines()[-1].strip() == "add[i0] = acc1 + acc0"


def test_epilogue_reading_the_reduction_elsewhere_than_its_point_is_not_fused():
    b = tp.TensorProgramBuilder()
    x = b.input("x", 4, 6)
    total = b.reduce(x, (1,), "sum")
    flipped = b.index_map(total, (4,), lambda d: (3 - d[0],), base="flip")
    program = fused(b.program(b.elementwise("add", tp.add, flipped, total)))
    assert [k.name for k in program.kernels] == ["sum", "add"]
    assert loop_ir.format_kernel(program.kernels[1]).splitlines()[-1].strip() == "add[i0] = sum[-i0 + 3] + sum[i0]"


def test_an_epilogue_reading_through_a_view_runs_the_reduction_at_its_points():
    program = fused(tp.matmul_view_bias())
    assert loop_ir.format_program(program) == (
        "loop_program(x: f32[6, 8], w: f32[8, 10], bias: f32[10]) -> (add: f32[2, 3, 10]):\n"
        "  kernel add(x: f32[6, 8], w: f32[8, 10], bias: f32[10]) -> (add: f32[2, 3, 10]):\n"
        "    for i0 in parallel(2):\n"
        "      for i1 in parallel(3):\n"
        "        for i2 in parallel(10):\n"
        "          acc0: f32 = 0.0\n"
        "          for r0 in reduce(8):\n"
        "            acc0 += x[i0 * 3 + i1, r0] * w[r0, i2]\n"
        "          add[i0, i1, i2] = acc0 + bias[i2]"
    )


def test_an_epilogue_reading_transposed_fuses():
    program = fused(tp.transposed_sum())
    assert loop_ir.format_program(program) == (
        "loop_program(x: f32[4, 6, 5]) -> (double: f32[5, 4]):\n"
        "  kernel double(x: f32[4, 6, 5]) -> (double: f32[5, 4]):\n"
        "    for i0 in parallel(5):\n"
        "      for i1 in parallel(4):\n"
        "        acc0: f32 = 0.0\n"
        "        for r0 in reduce(6):\n"
        "          acc0 += x[i1, r0, i0]\n"
        "        double[i0, i1] = acc0 * 2.0"
    )


def test_an_epilogue_reading_an_element_twice_reduces_once_and_repeats_serially():
    b = tp.TensorProgramBuilder()
    x = b.input("x", 4, 6)
    total = b.reduce(x, (1,), "sum")
    twice = b.index_map(total, (2, 4), lambda d: (d[1],), base="repeat")
    program = fused(b.program(b.elementwise("double", lambda a: tp.mul(a, 2.0), twice)))
    assert loop_ir.format_program(program).splitlines()[1:] == [
        "  kernel double(x: f32[4, 6]) -> (double: f32[2, 4]):",
        "    for i1 in parallel(4):",
        "      acc0: f32 = 0.0",
        "      for r0 in reduce(6):",
        "        acc0 += x[i1, r0]",
        "      for i0 in serial(2):",
        "        double[i0, i1] = acc0 * 2.0",
    ]


def test_chained_epilogues_all_fuse():
    b = tp.TensorProgramBuilder()
    x = b.input("x", 4, 6)
    total = b.reduce(x, (1,), "sum")
    scaled = b.elementwise("scale", lambda a: tp.mul(a, 0.5), total)
    program = fused(b.program(b.elementwise("exp", lambda a: ex.op("exp", a), scaled)))
    assert len(program.kernels) == 1
    assert loop_ir.format_kernel(program.kernels[0]).splitlines()[-1].strip() == "exp[i0] = exp(acc0 * 0.5)"


def _program(kernels, inputs, outputs, temporaries):
    return loop_ir.Program(inputs, outputs, temporaries, kernels)


def _copy(name, source, buffer_type, index=None):
    i = ex.Var("i0")
    store = loop_ir.Store(name, (i,), loop_ir.Load(source, (index or i,), buffer_type.dtype))
    return loop_ir.Kernel(
        name,
        (loop_ir.Buffer(source, buffer_type),),
        (loop_ir.Buffer(name, buffer_type),),
        (loop_ir.Loop("i0", buffer_type.shape[0], "parallel", (store,)),),
    )


def test_dead_buffers_and_their_kernels_are_removed_in_chains():
    t = TensorType((4,), dtypes.float32)
    x, a, b_, out = (loop_ir.Buffer(n, t) for n in ("x", "a", "b", "out"))
    program = _program(
        [_copy("a", "x", t), _copy("b", "a", t), _copy("out", "x", t)],
        [x], [out], [a, b_],
    )
    cleaned = RemoveDeadBuffers().apply(program, SM_90, {})
    assert [k.name for k in cleaned.kernels] == ["out"]
    assert cleaned.temporaries == ()
    assert RemoveDeadBuffers().apply(cleaned, SM_90, {}) is None


def test_kernel_inputs_are_made_exact_in_first_load_order():
    t = TensorType((4,), dtypes.float32)
    x, y, out = (loop_ir.Buffer(n, t) for n in ("x", "y", "out"))
    kernel = _copy("out", "x", t)
    program = _program([attrs.evolve(kernel, inputs=(y, x))], [x, y], [out], [])
    cleaned = RemoveDeadBuffers().apply(program, SM_90, {})
    assert cleaned.kernels[0].inputs == (x,)


@pytest.mark.parametrize("rule", [InlinePointwiseProducers(), FuseEpilogueIntoReduction(), FuseReadersFunctionIntoReduction(),
                                  RemoveDeadBuffers()], ids=lambda r: r.name)
def test_rules_report_no_change_on_a_fused_program(rule):
    assert rule.apply(fused(tp.running_example()), SM_90, {}) is None


@pytest.mark.parametrize("case", tp.CASES, ids=lambda c: c.id)
def test_every_case_fuses_to_verified_loop_ir_without_dead_temporaries(case):
    program = fused(case.program)
    loop_ir.verify_program(program)
    read = {load.buffer for k in program.kernels for load in loop_ir.loads(k.body)}
    assert all(t.name in read for t in program.temporaries)


@pytest.mark.parametrize("source", ["input", "reduction"])
def test_repeated_uses_do_not_grow_expressions_without_bound(source):
    b = tp.TensorProgramBuilder()
    value = b.input("x", 3, 4)
    if source == "reduction":
        value = b.reduce(value, (1,), "sum")
    for _ in range(16):
        value = b.elementwise("square", tp.mul, value, value)
    program = fused(b.program(value))
    sizes = [sum(1 for s in loop_ir.statements(k.body) for e in loop_ir.expressions(s) for _ in ex.walk(e)) for k in program.kernels]
    assert 1 < len(program.kernels) < 16
    assert max(sizes) <= MAX_EXPRESSION_NODES

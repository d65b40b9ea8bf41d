"""The Loop IR -> Kernel IR helpers that every schedule shares."""

import pytest

from lamina.backends.cuda.targets import SM90
from lamina.core.errors import ScheduleError
from lamina.core.ir import dtypes, expr as ex, kernel_ir, loop_ir
from lamina.core.stages.fuse import fuse
from lamina.core.stages.lower_to_loops import lower_to_loops
from lamina.plugins.fusion import FuseEpilogueIntoReduction, InlinePointwiseProducers, RemoveDeadBuffers
from lamina.plugins.schedules import loop_to_kernel
from tests.core.stages import tensor_programs as tp

f32 = dtypes.float32


def running_example_kernel():
    rules = [InlinePointwiseProducers(), FuseEpilogueIntoReduction(), RemoveDeadBuffers()]
    (kernel,) = fuse(lower_to_loops(tp.running_example()), rules, SM90, {}).kernels
    return kernel


def text(body):
    return kernel_ir.format_body(body, "")


def test_split_parallel_nest_peels_the_parallel_loops():
    kernel = running_example_kernel()
    loops, inner = loop_to_kernel.split_parallel_nest(kernel.body)
    assert [(loop.var, loop.extent) for loop in loops] == [("i0", 16), ("i1", 16)]
    assert [type(s).__name__ for s in inner] == ["Init", "Loop", "Store"]


def test_params_are_inputs_then_writable_outputs():
    assert loop_to_kernel.params(running_example_kernel()) == (
        kernel_ir.Param("x", f32, 1024),
        kernel_ir.Param("bias", f32, 64),
        kernel_ir.Param("w", f32, 1024),
        kernel_ir.Param("relu", f32, 256, writable=True),
    )


def test_body_translation_with_a_guard():
    kernel = running_example_kernel()
    _, inner = loop_to_kernel.split_parallel_nest(kernel.body)
    env = {"i0": ex.Var("row"), "i1": ex.Var("col") + 1}
    body = loop_to_kernel.translate_body(inner, kernel, env, guard=ex.op("lt", ex.Var("col"), 15))
    assert text(body) == [
        "var acc0: f32 = 0.0",
        "for r0 in 0..64:",
        "  acc0 = acc0 + (x[row * 64 + r0] + bias[r0]) * w[r0 * 16 + col + 1]",
        "if col < 15:",
        "  relu[row * 16 + col + 1] = max(acc0, 0.0)",
    ]


def test_accumulators_may_live_in_register_arrays():
    kernel = running_example_kernel()
    _, inner = loop_to_kernel.split_parallel_nest(kernel.body)
    slot = kernel_ir.Load("acc", (ex.const(1), ex.const(0)), f32)
    body = loop_to_kernel.translate_body(inner, kernel, {"i0": ex.const(2), "i1": ex.const(3), "acc0": slot})
    assert text(body) == [
        "acc[1][0] = 0.0",
        "for r0 in 0..64:",
        "  acc[1][0] = acc[1][0] + (x[r0 + 128] + bias[r0]) * w[r0 * 16 + 3]",
        "relu[35] = max(acc[1][0], 0.0)",
    ]


def test_a_caller_supplied_load_sees_translated_coordinates():
    kernel = running_example_kernel()
    seen = []

    def staged(node, index):
        seen.append((node.buffer, index))
        return kernel_ir.Load(f"{node.buffer}_tile", index, node.dtype)

    value = loop_ir.Load("x", (ex.Var("i0"), ex.Var("r0")), f32)
    got = loop_to_kernel.translate_expr(value, kernel, {"i0": ex.Var("ty") * 2}, load=staged)
    assert kernel_ir.format_expr(got) == "x_tile[ty * 2][r0]"
    assert seen == [("x", (ex.Var("ty") * 2, ex.Var("r0")))]


@pytest.mark.parametrize("op, printed", [("sum", "a + v"), ("prod", "a * v"), ("max", "max(a, v)"), ("min", "min(a, v)")])
def test_combine_spells_each_accumulation(op, printed):
    combined = loop_to_kernel.combine(op, ex.Var("a", f32), ex.Var("v", f32))
    assert kernel_ir.format_expr(combined) == printed
    assert combined.dtype == f32


def test_combine_converts_the_value_to_the_accumulator_type():
    combined = loop_to_kernel.combine("sum", ex.Var("a", f32), ex.Var("v", dtypes.float16))
    assert combined.args[1] == ex.Op("cast", (ex.Var("v", dtypes.float16),), f32)


def test_unknown_accumulation_is_explained():
    with pytest.raises(ScheduleError, match="unknown accumulation 'mean'"):
        loop_to_kernel.combine("mean", ex.Var("a", f32), ex.Var("v", f32))


def test_accumulate_without_init_or_mapping_is_explained():
    kernel = running_example_kernel()
    stray = (loop_ir.Accumulate("acc9", "sum", ex.Const(1.0, f32)),)
    with pytest.raises(ScheduleError, match="accumulator acc9"):
        loop_to_kernel.translate_body(stray, kernel, {})

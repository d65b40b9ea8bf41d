"""Kernels that fusion makes of row-wise ops (norms, softmax): several reductions and
serial loops inside one parallel row loop. The generic schedule runs them; the
contraction schedule must refuse them."""

import attrs
import pytest

from lamina.core.ir import expr as ex, loop_ir, tile_ir
from lamina.core.stages.fuse import fuse
from lamina.core.stages.lower_to_loops import lower_to_loops
from lamina.plugins.fusion import plugin
from lamina.plugins.schedules.contraction import ContractionSchedule, NotAContraction, analyse
from lamina.plugins.schedules.generic import GenericSchedule
from tests.plugins.fusion import row_programs
from tests.plugins.schedules.contraction_kernels import SM_90, linear, matmul
from tests.plugins.schedules.test_generic_numerics import relative_error, run_generic

SHAPES = [(13, 72), (300, 37)]
CASES = [
    lambda rows, width: row_programs.rms_norm(rows, width),
    lambda rows, width: row_programs.rms_norm(rows, width, residual=True),
    row_programs.softmax,
    row_programs.layer_norm,
]


def fused(case):
    rules = []
    plugin.lamina_register_fusion_rules(rules.append)
    return fuse(lower_to_loops(case.program), sorted(rules, key=lambda r: (-r.priority, r.name)), SM_90, {})


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("make", CASES, ids=["rms_norm", "add_rms_norm", "softmax", "layer_norm"])
def test_fused_row_kernel_is_one_generic_kernel_that_matches_pytorch(make, shape):
    case = make(*shape)
    program = fused(case)
    assert len(program.kernels) == 1
    inputs = [t.float() for t in case.inputs()]
    got = run_generic(program, inputs)
    expected = case.reference(*(t.double() for t in inputs))
    assert len(got) == len(expected)
    for out, want in zip(got, expected):
        assert relative_error(out, want) < 1e-5


@pytest.mark.parametrize("make", CASES, ids=["rms_norm", "add_rms_norm", "softmax", "layer_norm"])
def test_contraction_schedule_refuses_fused_row_kernels(make):
    (kernel,) = fused(make(13, 72)).kernels
    assert not ContractionSchedule().applies(kernel, SM_90)
    with pytest.raises(NotAContraction):
        analyse(kernel)


def test_generic_reduction_plan_counts_reductions_one_after_the_other_once_each():
    (kernel,) = fused(row_programs.softmax(13, 72)).kernels
    tile = GenericSchedule().schedule(kernel, SM_90, {})
    assert tile.reduction == tile_ir.ReductionPlan(vars=("r0", "r1"), extent=144, strategy="serial")
    assert tile.grid[0].extent == 13


def test_two_matmuls_in_one_kernel_are_not_a_contraction():
    first = matmul(5, 6, 7).kernel
    loops, (init, reduce_loop, store) = first.body[0], first.body[0].body[0].body
    f32 = init.value.dtype
    row = loop_ir.Load("c", (ex.Var("i0"), ex.Var("r1")), f32)
    second = loop_ir.Loop("r1", 6, "reduce", [loop_ir.Accumulate("acc1", "sum", row)])
    product = loop_ir.Store(store.buffer, store.index, ex.op("mul", ex.Var("acc0", f32), ex.Var("acc1", f32)))
    body = (init, reduce_loop, loop_ir.Init("acc1", init.value), second, product)
    inner = attrs.evolve(loops.body[0], body=body)
    kernel = attrs.evolve(
        first,
        inputs=first.inputs + (loop_ir.Buffer("c", first.inputs[0].type),),
        body=(attrs.evolve(loops, body=(inner,)),),
    )
    loop_ir.verify_kernel(kernel)
    assert not ContractionSchedule().applies(kernel, SM_90)


def test_a_store_reading_a_value_the_contraction_does_not_compute_is_refused():
    kernel = linear(4, 6, 8).kernel
    (outer,) = kernel.body
    (inner,) = outer.body
    *head, store = inner.body
    foreign = attrs.evolve(store, value=ex.op("add", store.value, ex.Var("acc7", store.value.dtype)))
    broken = attrs.evolve(kernel, body=(attrs.evolve(outer, body=(attrs.evolve(inner, body=(*head, foreign)),)),))
    with pytest.raises(NotAContraction, match="acc7"):
        analyse(broken)

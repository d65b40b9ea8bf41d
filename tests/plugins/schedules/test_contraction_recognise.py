"""Which Loop IR kernels the contraction schedule recognises, and how it reads their axes."""

import pytest

from lamina.core.errors import ScheduleError
from lamina.core.ir import dtypes, expr as ex, loop_ir
from lamina.core.ir.torch_ir import TensorType
from lamina.plugins.schedules.contraction import ContractionSchedule, NotAContraction, analyse

from .contraction_kernels import (
    ACC,
    F32,
    SM_90,
    batched,
    broadcast,
    contraction,
    linear,
    load,
    matmul_a_transposed,
    row_scaled,
    running_example,
)


def sides(c):
    return {o.text: o.side for o in c.operands}


def test_running_example_rows_columns_and_operands():
    c = analyse(running_example().kernel)
    assert (c.m, c.n, c.batch, c.reduce_var) == ("i0", "i1", (), "r0")
    assert sides(c) == {"x[i0, r0]": "m", "bias[r0]": "k", "w[r0, i1]": "n"}
    assert c.invariant_loads() == ()


def test_batched_matmul_puts_the_batch_on_its_own_axis():
    c = analyse(batched(3, 5, 7, 9).kernel)
    assert (c.m, c.n, c.batch) == ("i1", "i2", ("i0",))
    assert sides(c) == {"a[i0, i1, r0]": "m", "b[i0, r0, i2]": "n"}


def test_broadcast_operand_is_staged_once_for_every_batch():
    c = analyse(broadcast((2, 3), 5, 7, 9).kernel)
    assert (c.m, c.n, c.batch) == ("i2", "i3", ("i0", "i1"))
    assert sides(c) == {"a[i0, i1, i2, r0]": "m", "b[r0, i3]": "n"}


def test_transposed_operands_keep_their_sides():
    assert sides(analyse(linear(4, 6, 8).kernel)) == {"x[i0, r0]": "m", "w[i1, r0]": "n"}
    assert sides(analyse(matmul_a_transposed(4, 6, 8).kernel)) == {"a[r0, i0]": "m", "b[r0, i1]": "n"}


def test_loads_that_do_not_move_with_the_reduction_are_invariant():
    c = analyse(row_scaled(4, 6, 8).kernel)
    assert [loop_ir.format_value(load) for load in c.invariant_loads()] == ["s[i0]"]
    assert sides(c) == {"x[i0, r0]": "m", "w[r0, i1]": "n"}


def test_output_stored_transposed_swaps_rows_and_columns():
    kernel = contraction(
        "mm_t",
        {"a": (4, 6), "b": (6, 8)},
        [("i0", 4), ("i1", 8)],
        ("r0", 6),
        ex.op("mul", load("a", "i0", "r0"), load("b", "r0", "i1")),
        ("out", (8, 4)),
        out_index=("i1", "i0"),
    )
    c = analyse(kernel)
    assert (c.m, c.n) == ("i1", "i0")
    assert sides(c) == {"a[i0, r0]": "n", "b[r0, i1]": "m"}


def elementwise_kernel():
    body = [loop_ir.Store("out", (ex.Var("i0"), ex.Var("i1")), ex.op("add", load("a", "i0", "i1"), 1.0))]
    body = [loop_ir.Loop("i0", 4, "parallel", [loop_ir.Loop("i1", 8, "parallel", body)])]
    return loop_ir.Kernel(
        "add",
        [loop_ir.Buffer("a", TensorType((4, 8), F32))],
        [loop_ir.Buffer("out", TensorType((4, 8), F32))],
        body,
    )


def with_accumulate(kernel, op):
    inner = kernel.body[0].body[0]
    init, reduce_loop, store = inner.body
    reduce_loop = loop_ir.Loop(reduce_loop.var, reduce_loop.extent, "reduce", [loop_ir.Accumulate("acc0", op, reduce_loop.body[0].value)])
    nest = loop_ir.Loop("i0", kernel.body[0].extent, "parallel", [loop_ir.Loop("i1", inner.extent, "parallel", [init, reduce_loop, store])])
    return loop_ir.Kernel(kernel.name, kernel.inputs, kernel.outputs, [nest])


NOT_CONTRACTIONS = {
    "elementwise": (elementwise_kernel, "Init, one reduce loop"),
    "max_reduction": (lambda: with_accumulate(running_example().kernel, "max"), "must sum"),
    "one_parallel_loop": (
        lambda: loop_ir.Kernel(
            "rowsum",
            [loop_ir.Buffer("a", TensorType((4, 8), F32))],
            [loop_ir.Buffer("out", TensorType((4,), F32))],
            [loop_ir.Loop("i0", 4, "parallel", [
                loop_ir.Init("acc0", ex.Const(0.0, F32)),
                loop_ir.Loop("r0", 8, "reduce", [loop_ir.Accumulate("acc0", "sum", load("a", "i0", "r0"))]),
                loop_ir.Store("out", (ex.Var("i0"),), ACC),
            ])],
        ),
        "two or more",
    ),
    "columns_only": (
        lambda: contraction(
            "gemv_like",
            {"a": (8, 6), "s": (6,)},
            [("i0", 4), ("i1", 8)],
            ("r0", 6),
            ex.op("mul", load("a", "i1", "r0"), load("s", "r0")),
            ("out", (4, 8)),
        ),
        "row",
    ),
    "operand_moves_with_rows_and_columns": (
        lambda: contraction(
            "both",
            {"a": (4, 8, 6), "b": (6, 8)},
            [("i0", 4), ("i1", 8)],
            ("r0", 6),
            ex.op("mul", load("a", "i0", "i1", "r0"), load("b", "r0", "i1")),
            ("out", (4, 8)),
        ),
        "row",
    ),
    "gathered_operand": (
        lambda: contraction(
            "gather",
            {"a": (4, 6), "idx": (6,), "b": (6, 8)},
            [("i0", 4), ("i1", 8)],
            ("r0", 6),
            ex.op("mul", load("a", "i0", ex.cast(load("idx", "r0"), dtypes.index)), load("b", "r0", "i1")),
            ("out", (4, 8)),
        ),
        "reads another buffer in its index",
    ),
}


@pytest.mark.parametrize("name", NOT_CONTRACTIONS)
def test_kernels_that_are_not_contractions_are_refused_with_a_reason(name):
    build, reason = NOT_CONTRACTIONS[name]
    kernel = build()
    assert not ContractionSchedule().applies(kernel, SM_90)
    with pytest.raises(NotAContraction, match=reason):
        analyse(kernel)
    with pytest.raises(NotAContraction, match=kernel.name):
        ContractionSchedule().schedule(kernel, SM_90, {})


def test_contractions_apply():
    for case in (running_example(), batched(2, 3, 4, 5), linear(3, 4, 5, bias_relu=True), row_scaled(3, 4, 5)):
        assert ContractionSchedule().applies(case.kernel, SM_90), case.id


def test_batches_beyond_the_grid_are_left_to_other_schedules():
    case = batched(70000, 2, 3, 4)
    assert not ContractionSchedule().applies(case.kernel, SM_90)
    with pytest.raises(ScheduleError, match="more than 65535 blocks along y or z"):
        ContractionSchedule().schedule(case.kernel, SM_90, {})


def test_a_split_k_slice_that_ends_early_is_read_as_the_plain_sum_and_its_end():
    from lamina.plugins.schedules.contraction.split_k.partial_sums import split

    parts = split(analyse(linear(5, 80, 24).kernel), 2, set())
    c = analyse(parts.partial)
    assert sides(c) == {"x[i0, s * 48 + r0]": "m", "w[i1, s * 48 + r0]": "n"}
    assert (c.batch, c.slice_bound.text("r0"), c.slice_bound.end, c.slice_bound.multiple) == (
        ("s",), "s * 48 + r0 < 80", 80, 16)


@pytest.mark.parametrize("start", [ex.Var("i0"), ex.const(2)], ids=["moving_with_an_output_row", "the_same_in_every_block"])
def test_other_guards_of_the_reduction_stay_in_the_summed_term(start):
    guarded = ex.op("where", ex.op("lt", ex.Var("r0") + start, ex.const(6)),
                    ex.op("mul", load("a", "i0", "r0"), load("b", "r0", "i1")), ex.cast(ex.const(0), F32))
    kernel = contraction("banded", {"a": (4, 6), "b": (6, 8)}, [("i0", 4), ("i1", 8)], ("r0", 6), guarded, ("out", (4, 8)))
    c = analyse(kernel)
    assert c.slice_bound is None and c.value == guarded

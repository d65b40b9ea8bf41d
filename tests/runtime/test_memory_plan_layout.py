"""Lifetimes on hand-written programs: first and last kernel, outputs kept, the peak, the printed plan."""

from lamina.core.ir import dtypes, kernel_ir, loop_ir
from lamina.core.ir.torch_ir import TensorType
from lamina.runtime.memory_plan import plan_memory


def buffer(name, shape, dtype=dtypes.float32):
    return loop_ir.Buffer(name, TensorType(shape, dtype))


def program(temporaries, uses, outputs=(("out", (4,)),)):
    """``uses[i]`` names the buffers that kernel ``i`` touches; only the plan's inputs are real."""
    kernels = [
        kernel_ir.Kernel(f"k{i}", [kernel_ir.Param(name, dtypes.float32, 1) for name in names], [], [],
                         kernel_ir.Launch((1, 1, 1), (32, 1, 1)))
        for i, names in enumerate(uses)
    ]
    loop = loop_ir.Program([buffer("x", (4,))], [buffer(n, s) for n, s in outputs], temporaries, [])
    return loop, kernel_ir.Program(kernels)


def test_a_temporary_lives_from_its_first_kernel_to_its_last():
    temporaries = [buffer("a", (256,)), buffer("b", (256,)), buffer("c", (256,))]
    plan = plan_memory(*program(temporaries, [["x", "a"], ["a", "b"], ["b", "c"], ["c", "out"]]))
    assert [(t.buffer.name, t.first, t.last) for t in plan.lifetimes] == [
        ("a", 0, 1), ("b", 1, 2), ("c", 2, 3), ("out", 3, 3)]
    assert [b.name for b in plan.allocated_before(1)] == ["b"]
    assert plan.released_after(1) == ("a",)
    assert plan.peak_bytes == 2 * 1024
    assert plan.total_bytes == 3 * 1024 + 16


def test_an_output_is_allocated_late_and_never_released():
    temporaries = [buffer("big", (1000,))]
    plan = plan_memory(*program(temporaries, [["x", "big"], ["big"], ["big", "logits"]],
                                outputs=(("logits", (500,)),)))
    logits = plan.lifetime("logits")
    assert (logits.first, logits.output) == (2, True)
    assert all("logits" not in plan.released_after(k) for k in range(3))
    assert plan.live_bytes(0) == 4000 and plan.live_bytes(2) == 6000


def test_a_buffer_of_another_dtype_counts_its_own_bytes():
    temporaries = [buffer("wide", (512,)), buffer("half", (100,), dtypes.float16)]
    plan = plan_memory(*program(temporaries, [["wide"], ["wide", "half"], ["half", "out"]]))
    assert plan.lifetime("half").nbytes == 200
    assert plan.peak_bytes == 2048 + 200


def test_inputs_and_untouched_buffers_are_not_planned():
    plan = plan_memory(*program([buffer("dead", (8,))], [["x", "out"]]))
    assert [t.buffer.name for t in plan.lifetimes] == ["out"]


def test_the_plan_prints_as_golden_text():
    temporaries = [buffer("a", (256,)), buffer("b", (64, 2)), buffer("c", (256,), dtypes.float16)]
    plan = plan_memory(*program(temporaries, [["a"], ["a", "b"], ["b", "c"], ["c", "out"]]))
    assert str(plan) == (
        "memory plan: 3 temporaries and 1 outputs, at most 1.5 KiB live at once (all at once 2.0 KiB)\n"
        "  a: f32[256]  1.0 KiB  from kernel 0, released after kernel 1\n"
        "  b: f32[64, 2]  512 B  from kernel 1, released after kernel 2\n"
        "  c: f16[256]  512 B  from kernel 2, released after kernel 3\n"
        "  out: f32[4]  16 B  from kernel 3, returned"
    )

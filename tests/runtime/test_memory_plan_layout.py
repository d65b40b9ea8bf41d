"""The arena layout itself, on hand-written programs: reuse by liveness, alignment, the printed plan."""

from lamina.backends.memory_plan import plan_memory
from lamina.core.ir import dtypes, kernel_ir, loop_ir
from lamina.core.ir.torch_ir import TensorType


def buffer(name, shape, dtype=dtypes.float32):
    return loop_ir.Buffer(name, TensorType(shape, dtype))


def program(temporaries, uses):
    """``uses[i]`` names the buffers that kernel ``i`` touches; only the plan's inputs are real."""
    kernels = [
        kernel_ir.Kernel(f"k{i}", [kernel_ir.Param(name, dtypes.float32, 1) for name in names], [], [],
                         kernel_ir.Launch((1, 1, 1), (32, 1, 1)))
        for i, names in enumerate(uses)
    ]
    loop = loop_ir.Program([buffer("x", (4,))], [buffer("out", (4,))], temporaries, [])
    return loop, kernel_ir.Program(kernels)


def test_a_dead_temporary_gives_its_bytes_to_a_later_one():
    temporaries = [buffer("a", (256,)), buffer("b", (256,)), buffer("c", (256,))]
    plan = plan_memory(*program(temporaries, [["x", "a"], ["a", "b"], ["b", "c"], ["c", "out"]]))
    assert plan.placement("a").offset == plan.placement("c").offset
    assert plan.placement("b").offset != plan.placement("a").offset
    assert (plan.arena_bytes, plan.temporary_bytes) == (2048, 3072)


def test_a_smaller_temporary_of_another_dtype_fits_in_a_freed_block():
    temporaries = [buffer("wide", (512,)), buffer("mid", (300,)), buffer("small", (100,), dtypes.float16)]
    plan = plan_memory(*program(temporaries, [["wide"], ["wide", "mid"], ["mid", "small"], ["small"]]))
    assert plan.placement("small").offset == plan.placement("wide").offset
    assert plan.arena_bytes == 2048 + 1280


def test_every_offset_is_aligned_even_after_odd_sizes():
    temporaries = [buffer(f"t{i}", (i * 7 + 3,), dtypes.bfloat16) for i in range(6)]
    plan = plan_memory(*program(temporaries, [[f"t{i}" for i in range(6)]]))
    assert all(p.offset % 256 == 0 for p in plan.placements)
    assert plan.arena_bytes == plan.temporary_bytes == 6 * 256


def test_inputs_and_outputs_are_not_in_the_arena():
    plan = plan_memory(*program([], [["x", "out"]]))
    assert plan.placements == () and plan.arena_bytes == 0


def test_the_plan_prints_as_golden_text():
    temporaries = [buffer("a", (256,)), buffer("b", (64, 2)), buffer("c", (256,), dtypes.float16)]
    plan = plan_memory(*program(temporaries, [["a"], ["a", "b"], ["b", "c"], ["c"]]))
    assert str(plan) == (
        "memory plan: 3 temporaries in an arena of 1.5 KiB (separately 2.0 KiB)\n"
        "  a: f32[256]  bytes [0, 1024)  kernels 0..1\n"
        "  c: f16[256]  bytes [0, 512)  kernels 2..3\n"
        "  b: f32[64, 2]  bytes [1024, 1536)  kernels 1..2"
    )

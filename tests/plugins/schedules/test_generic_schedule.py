import attrs
import pytest

from lamina.backends.cuda.targets import SM90 as TARGET
from lamina.core.errors import ScheduleError
from lamina.core.ir import kernel_ir, tile_ir
from lamina.core.stages.fuse import fuse
from lamina.core.stages.lower_to_loops import lower_to_loops
from lamina.plugins.fusion import FuseEpilogueIntoReduction, InlinePointwiseProducers, RemoveDeadBuffers
from lamina.plugins.schedules.generic import GenericSchedule, plugin
from lamina.plugins.schedules.generic.tiling import choose_threads
from tests.core.stages import tensor_programs as tp

RULES = [InlinePointwiseProducers(), FuseEpilogueIntoReduction(), RemoveDeadBuffers()]

RUNNING_EXAMPLE_TILE = """\
tile relu  schedule=generic
  grid (2, 1, 1) blocks of 128 threads
  parallel i0 * i1 (256): block.x tile 128 = thread.x 128 x 1 per thread (contiguous)
  reduce r0 (64): serial"""

RUNNING_EXAMPLE_KERNEL = """\
kernel relu  grid (2, 1, 1)  block (128, 1, 1)
  param in x: f32[1024]
  param in bias: f32[64]
  param in w: f32[1024]
  param out relu: f32[256]
  var linear: i64 = blockIdx.x * 128 + threadIdx.x
  var i0: i64 = linear // 16
  var i1: i64 = linear % 16
  var acc0: f32 = 0.0
  for r0 in 0..64:
    acc0 = acc0 + (x[i0 * 64 + r0] + bias[r0]) * w[r0 * 16 + i1]
  relu[i0 * 16 + i1] = max(acc0, 0.0)"""

RAGGED_KERNEL = """\
kernel relu  grid (3, 1, 1)  block (128, 1, 1)
  param in x: f32[1105]
  param in bias: f32[65]
  param in w: f32[1235]
  param out relu: f32[323]
  var linear: i64 = blockIdx.x * 128 + threadIdx.x
  if linear < 323:
    var i0: i64 = linear // 19
    var i1: i64 = linear % 19
    var acc0: f32 = 0.0
    for r0 in 0..65:
      acc0 = acc0 + (x[i0 * 65 + r0] + bias[r0]) * w[r0 * 19 + i1]
    relu[i0 * 19 + i1] = max(acc0, 0.0)"""


def fused_kernels(program):
    return fuse(lower_to_loops(program), RULES, TARGET, {}).kernels


def generic(kernel, knobs=None):
    schedule = GenericSchedule()
    tile = schedule.schedule(kernel, TARGET, knobs or {})
    return tile, schedule.lower(tile, TARGET)


def test_plugin_registers_the_generic_schedule_as_the_fallback():
    registered = []
    plugin.lamina_register_schedules(registered.append)
    (schedule,) = registered
    assert (schedule.name, schedule.priority) == ("generic", 0)


def test_running_example_tile_and_kernel():
    (kernel,) = fused_kernels(tp.running_example())
    tile, lowered = generic(kernel)
    assert GenericSchedule().applies(kernel, TARGET)
    assert tile_ir.format_tile_kernel(tile) == RUNNING_EXAMPLE_TILE
    assert kernel_ir.format_kernel(lowered) == RUNNING_EXAMPLE_KERNEL


def test_points_beyond_the_last_output_are_guarded():
    (kernel,) = fused_kernels(tp.running_example(17, 65, 19))
    assert kernel_ir.format_kernel(generic(kernel)[1]) == RAGGED_KERNEL


def test_full_reduction_is_one_guarded_thread():
    b = tp.TensorProgramBuilder()
    x = b.input("x", 300)
    (kernel,) = fused_kernels(b.program(b.reduce(x, (0,), "sum")))
    tile, lowered = generic(kernel)
    assert tile.grid[0].vars == () and tile.grid[0].extent == 1
    assert lowered.launch == kernel_ir.Launch((1, 1, 1), (32, 1, 1))
    assert kernel_ir.format_kernel(lowered).splitlines()[-5:] == [
        "  if linear < 1:",
        "    var acc0: f32 = 0.0",
        "    for r0 in 0..300:",
        "      acc0 = acc0 + x[r0]",
        "    sum[0] = acc0",
    ]


def test_one_parallel_loop_uses_the_linear_index_directly():
    (kernel,) = fused_kernels(tp.mean((1000, 8)))
    lines = kernel_ir.format_kernel(generic(kernel)[1]).splitlines()
    assert lines[-1] == "    mean[linear] = acc0 * 0.125"
    assert not any(line.strip().startswith("var i0") for line in lines)


def test_the_index_variable_avoids_buffer_names():
    b = tp.TensorProgramBuilder()
    x = b.input("linear", 40)
    (kernel,) = fused_kernels(b.program(b.elementwise("double", lambda a: tp.mul(a, 2.0), x)))
    lines = kernel_ir.format_kernel(generic(kernel)[1]).splitlines()
    assert lines[3] == "  var linear2: i64 = blockIdx.x * 64 + threadIdx.x"
    assert lines[-1] == "    double[linear2] = linear[linear2] * 2.0"


@pytest.mark.parametrize(
    "total, threads",
    [(1, 32), (5, 32), (33, 64), (128, 128), (129, 128), (2 * 256 * 132 - 1, 128), (2 * 256 * 132, 256)],
)
def test_threads_per_block_follow_the_size(total, threads):
    assert choose_threads(total, TARGET, {}) == threads


def test_threads_knob_pins_the_block_size():
    (kernel,) = fused_kernels(tp.running_example())
    tile, lowered = generic(kernel, {"threads": 64})
    assert tile.grid[0].threads == 64
    assert tile.knobs == (("threads", 64),)
    assert lowered.launch.block == (64, 1, 1) and lowered.launch.grid == (4, 1, 1)


@pytest.mark.parametrize("threads", [0, 48, 2048, "128", True])
def test_unusable_threads_knob_is_explained(threads):
    (kernel,) = fused_kernels(tp.running_example())
    with pytest.raises(ScheduleError, match="multiple of 32 between 32 and 1024"):
        generic(kernel, {"threads": threads})


def test_other_knobs_are_ignored():
    (kernel,) = fused_kernels(tp.running_example())
    tile, _ = generic(kernel, {"block_m": 64})
    assert tile.knobs == ()


def test_a_tile_from_another_schedule_is_refused():
    (kernel,) = fused_kernels(tp.running_example())
    tile, _ = generic(kernel)
    foreign = attrs.evolve(tile, grid=(attrs.evolve(tile.grid[0], per_thread=2),))
    with pytest.raises(ScheduleError, match="one thread per point"):
        GenericSchedule().lower(foreign, TARGET)


def all_generic_kernels():
    for case in tp.CASES:
        for fused in (False, True):
            program = lower_to_loops(case.program)
            if fused:
                program = fuse(program, RULES, TARGET, {})
            for kernel in program.kernels:
                yield pytest.param(kernel, id=f"{case.id}-{'fused' if fused else 'unfused'}-{kernel.name}")


@pytest.mark.parametrize("kernel", list(all_generic_kernels()))
def test_every_generic_kernel_compiles_for_sm90_without_spills(kernel):
    pytest.importorskip("cuda.bindings.nvrtc")
    from lamina.backends.cuda.codegen import emit_cuda, kernel_symbol
    from lamina.backends.cuda.nvrtc import compile_kernel

    lowered = generic(kernel)[1]
    compiled = compile_kernel(emit_cuda(lowered), kernel_symbol(lowered), "sm_90")
    assert not compiled.spills
    assert compiled.registers <= TARGET.registers_per_thread

"""The pointwise schedule's decisions: which kernels it takes, what its Tile IR and Kernel IR
say, the knobs a user may pin, and what it expects a kernel to cost."""

import pytest
import torch

import lamina
from lamina.backends.cuda.targets import SM90 as SM_90
from lamina.core.errors import ScheduleError
from lamina.core.ir import dtypes, expr as ex, kernel_ir, loop_ir, tile_ir
from lamina.core.ir.torch_ir import TensorType
from lamina.plugins.schedules.pointwise import PointwiseSchedule
from lamina.plugins.schedules.pointwise.cost import SCALAR_EFFICIENCY, VECTOR_EFFICIENCY

from .kernels import (
    BF16,
    F32,
    broadcast_column,
    broadcast_row,
    cast,
    cat_last,
    rope,
    run_on_simulator,
    silu_up,
    transpose,
    transposed_store,
)

SCHEDULE = PointwiseSchedule()


@pytest.fixture(scope="module")
def silu_up_program():
    """``silu(a) * b`` on 4 x 100 float32, through the whole pipeline."""
    return lamina.compile(lambda a, b: torch.nn.functional.silu(a) * b, (torch.randn(4, 100), torch.randn(4, 100)))


SILU_UP_TILE = """\
tile mul  schedule=pointwise
  grid (1, 1, 1) blocks of 128 threads
  parallel i0 * i1 (400): block.x tile 512 = thread.x 128 x 4 per thread (contiguous)
  vector width 4
  vectors_per_thread = 1
  steps = 1
  vector_loads = a[i0, i1], b[i0, i1]
  vector_stores = mul[i0, i1]"""

SILU_UP_KERNEL = """\
kernel mul  grid (1, 1, 1)  block (128, 1, 1)  overlapping the previous kernel
  param in a: f32[400]
  param in b: f32[400]
  param out mul: f32[400]
  register a_vector: f32[1][4]
  register b_vector: f32[1][4]
  register mul_vector: f32[1][4]
  wait for the previous kernel
  let the next kernel launch
  var vector: i64 = blockIdx.x * 128 + threadIdx.x
  if vector < 100:
    vector load x4 a_vector[0][0] <- a[vector * 4]
    vector load x4 b_vector[0][0] <- b[vector * 4]
    mul_vector[0][0] = a_vector[0][0] * sigmoid(a_vector[0][0]) * b_vector[0][0]
    mul_vector[0][1] = a_vector[0][1] * sigmoid(a_vector[0][1]) * b_vector[0][1]
    mul_vector[0][2] = a_vector[0][2] * sigmoid(a_vector[0][2]) * b_vector[0][2]
    mul_vector[0][3] = a_vector[0][3] * sigmoid(a_vector[0][3]) * b_vector[0][3]
    vector store x4 mul[vector * 4] <- mul_vector[0][0]"""


def test_silu_up_tile_ir(silu_up_program):
    assert silu_up_program.compilation.ir("tile") == SILU_UP_TILE


def test_silu_up_kernel_ir(silu_up_program):
    assert silu_up_program.compilation.ir("kernel") == SILU_UP_KERNEL


QWEN_SILU_UP_BF16_TILE = """\
tile silu_up  schedule=pointwise
  grid (18944, 1, 1) blocks of 256 threads
  parallel i0 * i1 (38797312): block.x tile 2048 = thread.x 256 x 8 per thread (contiguous)
  vector width 8
  vectors_per_thread = 1
  steps = 1
  vector_loads = gate[i0, i1], up[i0, i1]
  vector_stores = out[i0, i1]"""


def test_a_large_tensor_gets_a_16_byte_vector_per_thread_and_a_block_per_256_vectors():
    """Qwen2.5-7B's silu(gate) * up at 2048 tokens: 8 bfloat16 per vector, one per thread,
    18944 blocks of 256 (the default that beat a grid capped at what the SMs hold by 10%
    on the same shape in fp32 on the H200)."""
    tile = SCHEDULE.schedule(silu_up((2048, 18944), BF16).kernel, SM_90, {})
    assert tile_ir.format_tile_kernel(tile) == QWEN_SILU_UP_BF16_TILE


SEVERAL_STEPS_KERNEL = """\
kernel silu_up  grid (36, 1, 1)  block (32, 1, 1)
  param in gate: f32[18000]
  param in up: f32[18000]
  param out out: f32[18000]
  register gate_vector: f32[2][4]
  register up_vector: f32[2][4]
  register out_vector: f32[2][4]
  var first_vector: i64 = blockIdx.x * 128 + threadIdx.x
  for step in 0..2:
    unrolled for slot in 0..2:
      var vector: i64 = first_vector + step * 64 + slot * 32
      if vector < 4500:
        vector load x4 gate_vector[slot][0] <- gate[vector * 4]
        vector load x4 up_vector[slot][0] <- up[vector * 4]
    unrolled for slot in 0..2:
      var vector: i64 = first_vector + step * 64 + slot * 32
      if vector < 4500:
        out_vector[slot][0] = gate_vector[slot][0] * sigmoid(gate_vector[slot][0]) * up_vector[slot][0]
        out_vector[slot][1] = gate_vector[slot][1] * sigmoid(gate_vector[slot][1]) * up_vector[slot][1]
        out_vector[slot][2] = gate_vector[slot][2] * sigmoid(gate_vector[slot][2]) * up_vector[slot][2]
        out_vector[slot][3] = gate_vector[slot][3] * sigmoid(gate_vector[slot][3]) * up_vector[slot][3]
        vector store x4 out[vector * 4] <- out_vector[slot][0]"""


def test_a_thread_loads_all_its_vectors_before_it_computes_on_any():
    tile = SCHEDULE.schedule(silu_up((9, 2000)).kernel, SM_90, {"threads": 32, "vectors_per_thread": 2, "steps": 2})
    assert kernel_ir.format_kernel(SCHEDULE.lower(tile, SM_90)) == SEVERAL_STEPS_KERNEL


def described(case, knobs=None):
    return dict(SCHEDULE.schedule(case.kernel, SM_90, knobs or {}).knobs)


ROPE_TILE = """\
tile rope  schedule=pointwise
  grid (2, 1, 1) blocks of 128 threads
  parallel i0 * i1 * i2 * i3 (768): block.x tile 512 = thread.x 128 x 4 per thread (contiguous)
  vector width 4
  vectors_per_thread = 1
  steps = 1
  vector_loads = x[i0, i1, i2, i3], cos[i2, i3], x[0, i1, i2, i3 % 64 + 64] if i3 < 64, x[0, i1, i2, i3 % 64] unless i3 < 64, sin[i2, i3]
  vector_stores = out[i0, i1, i2, i3]
  conditions_per_vector = i3 < 64"""

ROPE_KERNEL = """\
kernel rope  grid (2, 1, 1)  block (128, 1, 1)
  param in x: f32[768]
  param in cos: f32[384]
  param in sin: f32[384]
  param out out: f32[768]
  register x_vector: f32[1][4]
  register cos_vector: f32[1][4]
  register x_vector2: f32[1][4]
  register x_vector3: f32[1][4]
  register sin_vector: f32[1][4]
  register out_vector: f32[1][4]
  var vector: i64 = blockIdx.x * 128 + threadIdx.x
  if vector < 192:
    var i1: i64 = vector // 96
    var i2: i64 = vector // 32 % 3
    var i3: i64 = vector % 32 * 4
    var condition: b8 = i3 < 64
    vector load x4 x_vector[0][0] <- x[vector * 4]
    vector load x4 cos_vector[0][0] <- cos[vector % 96 * 4]
    vector load x4 sin_vector[0][0] <- sin[vector % 96 * 4]
    if condition:
      vector load x4 x_vector2[0][0] <- x[i1 * 384 + i2 * 128 + i3 % 64 + 64]
      out_vector[0][0] = x_vector[0][0] * cos_vector[0][0] + -x_vector2[0][0] * sin_vector[0][0]
      out_vector[0][1] = x_vector[0][1] * cos_vector[0][1] + -x_vector2[0][1] * sin_vector[0][1]
      out_vector[0][2] = x_vector[0][2] * cos_vector[0][2] + -x_vector2[0][2] * sin_vector[0][2]
      out_vector[0][3] = x_vector[0][3] * cos_vector[0][3] + -x_vector2[0][3] * sin_vector[0][3]
    else:
      vector load x4 x_vector3[0][0] <- x[i1 * 384 + i2 * 128 + i3 % 64]
      out_vector[0][0] = x_vector[0][0] * cos_vector[0][0] + x_vector3[0][0] * sin_vector[0][0]
      out_vector[0][1] = x_vector[0][1] * cos_vector[0][1] + x_vector3[0][1] * sin_vector[0][1]
      out_vector[0][2] = x_vector[0][2] * cos_vector[0][2] + x_vector3[0][2] * sin_vector[0][2]
      out_vector[0][3] = x_vector[0][3] * cos_vector[0][3] + x_vector3[0][3] * sin_vector[0][3]
    vector store x4 out[vector * 4] <- out_vector[0][0]"""


def test_rope_reads_its_rotated_half_as_vectors_each_only_where_its_half_of_the_row_is():
    """The condition ``i3 < 64`` is the same in every lane of a vector of 4, so it is
    evaluated once per vector; each half of the rotation is one 16-byte load, made only
    by the vectors in its half of the row, and the arithmetic branches on it."""
    tile = SCHEDULE.schedule(rope(2, 3, 128, F32).kernel, SM_90, {})
    assert tile_ir.format_tile_kernel(tile) == ROPE_TILE
    assert kernel_ir.format_kernel(SCHEDULE.lower(tile, SM_90)) == ROPE_KERNEL


@pytest.mark.parametrize("dim,dtype,width", [(128, BF16, 8), (64, F32, 4), (64, BF16, 8), (12, F32, 2), (12, BF16, 2)])
def test_rope_rotated_half_is_a_vector_wherever_the_vector_divides_the_half(dim, dtype, width):
    """head_dim 12: a vector of 4 would straddle the half (6); one of 2 reads every operand as a vector."""
    half = dim // 2
    tile = SCHEDULE.schedule(rope(2, 3, dim, dtype).kernel, SM_90, {})
    knobs = dict(tile.knobs)
    assert tile.vector_width == width
    assert "scalar_loads" not in knobs
    assert f"x[0, i1, i2, i3 % {half} + {half}] if i3 < {half}, x[0, i1, i2, i3 % {half}] unless i3 < {half}" in \
        knobs["vector_loads"]
    assert knobs["conditions_per_vector"] == f"i3 < {half}"


@pytest.mark.parametrize("dim,knobs", [(10, {}), (12, {"vector_width": 4}), (128, {"vector_width": 16})],
                         ids=["half_5", "half_6_width_4", "half_64_width_16"])
def test_a_rotation_that_wraps_inside_a_vector_stays_element_by_element(dim, knobs):
    """head_dim 10 (half 5) with vectors of 2, or 12 (half 6) with 4: the vector at i3 = 4
    holds both halves; its rotated elements are read one by one, each testing its own i3.
    With a half of 64 even 16 lanes stay vectors."""
    half = dim // 2
    tile = SCHEDULE.schedule(rope(1, 3, dim).kernel, SM_90, knobs)
    described = dict(tile.knobs)
    kernel = kernel_ir.format_kernel(SCHEDULE.lower(tile, SM_90))
    if dim == 128:
        assert "scalar_loads" not in described and "if condition:" in kernel
        return
    assert described["scalar_loads"] == f"x[0, i1, i2, i3 % {half} + {half}], x[0, i1, i2, i3 % {half}]"
    assert "conditions_per_vector" not in described and "condition" not in kernel
    assert f"where(i3 + 1 < {half}, -x[" in kernel


CAT_TILE_KNOBS = {
    "vector_loads": "p0[i0, i1 % 8] if i1 < 8, p1[i0, i1 % 4] unless i1 < 8 if i1 < 12, "
                    "p2[i0, i1 % 12] unless i1 < 8 unless i1 < 12",
    "vector_stores": "out[i0, i1]",
    "conditions_per_vector": "i1 < 8, i1 < 12",
}

CAT_BRANCHES = """\
    if condition:
      vector load x4 p0_vector[0][0] <- p0[i0 * 8 + i1 % 8]
      out_vector[0][0] = p0_vector[0][0] * 2.0
      out_vector[0][1] = p0_vector[0][1] * 2.0
      out_vector[0][2] = p0_vector[0][2] * 2.0
      out_vector[0][3] = p0_vector[0][3] * 2.0
    else:
      if condition2:
        vector load x4 p1_vector[0][0] <- p1[i0 * 4 + i1 % 4]
        out_vector[0][0] = p1_vector[0][0] * 2.0
        out_vector[0][1] = p1_vector[0][1] * 2.0
        out_vector[0][2] = p1_vector[0][2] * 2.0
        out_vector[0][3] = p1_vector[0][3] * 2.0
      else:
        vector load x4 p2_vector[0][0] <- p2[i0 * 12 + i1 % 12]
        out_vector[0][0] = p2_vector[0][0] * 2.0
        out_vector[0][1] = p2_vector[0][1] * 2.0
        out_vector[0][2] = p2_vector[0][2] * 2.0
        out_vector[0][3] = p2_vector[0][3] * 2.0"""


def test_each_part_of_a_cat_is_loaded_only_by_the_vectors_it_fills():
    """Nested uniform conditions nest the guards: one load per vector, not one per part."""
    tile = SCHEDULE.schedule(cat_last(3, (8, 4, 12)).kernel, SM_90, {})
    knobs = dict(tile.knobs)
    assert {name: knobs[name] for name in CAT_TILE_KNOBS} == CAT_TILE_KNOBS
    assert "scalar_loads" not in knobs
    assert CAT_BRANCHES in kernel_ir.format_kernel(SCHEDULE.lower(tile, SM_90))


def test_past_eight_copies_of_the_arithmetic_it_selects_by_the_conditions_names():
    """A cat of 9 parts would copy its arithmetic 9 times; the loads stay guarded vectors."""
    case = cat_last(2, (4,) * 9)
    kernel = SCHEDULE.lower(SCHEDULE.schedule(case.kernel, SM_90, {}), SM_90)
    assert "out_vector[0][0] = where(condition, p0_vector[0][0], where(condition2, p1_vector[0][0], " in \
        kernel_ir.format_kernel(kernel)
    inputs = case.inputs()
    out, report = run_on_simulator(case, kernel, inputs)
    assert torch.equal(out, case.reference(*inputs)) and report.faults == []


def test_a_part_of_a_cat_that_a_vector_straddles_is_read_element_by_element():
    """With 8 lanes the vector at i1 = 8 holds p1's 4 elements and p2's first 4."""
    knobs = dict(SCHEDULE.schedule(cat_last(3, (8, 4, 12), BF16).kernel, SM_90, {"vector_width": 8}).knobs)
    assert knobs["vector_loads"] == "p0[i0, i1 % 8] if i1 < 8"
    assert knobs["scalar_loads"] == "p1[i0, i1 % 4], p2[i0, i1 % 12]"
    assert knobs["conditions_per_vector"] == "i1 < 8"


def test_an_operand_broadcast_along_rows_is_a_vector_and_one_along_columns_a_scalar():
    assert described(broadcast_row((7, 100)))["vector_loads"] == "x[i0, i1], w[i1]"
    column = described(broadcast_column((7, 100)))
    assert (column["vector_loads"], column["scalar_loads"]) == ("x[i0, i1]", "w[i0]")


def test_a_transposed_store_is_written_element_by_element():
    knobs = described(transposed_store((7, 100)))
    assert (knobs["vector_loads"], knobs["scalar_stores"]) == ("x[i0, i1]", "out[i1, i0]")
    assert "vector_stores" not in knobs


@pytest.mark.parametrize("shape,dtype,width", [
    ((7, 100), F32, 4), ((7, 100), BF16, 4), ((40, 48), BF16, 8), ((2, 130), F32, 2), ((3, 5), F32, 1),
])
def test_the_vector_is_16_bytes_of_output_or_what_divides_the_row(shape, dtype, width):
    assert SCHEDULE.schedule(silu_up(shape, dtype).kernel, SM_90, {}).vector_width == width


def test_a_cast_to_bfloat16_stores_16_bytes_and_loads_its_float32_input_in_two_accesses():
    kernel = SCHEDULE.lower(SCHEDULE.schedule(cast((5, 48), F32).kernel, SM_90, {}), SM_90)
    accesses = [s for s in kernel_ir.statements(kernel.body) if isinstance(s, (kernel_ir.VectorLoad, kernel_ir.VectorStore))]
    assert [(type(s).__name__, s.width) for s in accesses] == [("VectorLoad", 4), ("VectorLoad", 4), ("VectorStore", 8)]


def test_a_transpose_has_no_vector_access():
    tile = SCHEDULE.schedule(transpose((7, 100)).kernel, SM_90, {})
    assert tile.vector_width == 1
    kernel = SCHEDULE.lower(tile, SM_90)
    assert kernel.arrays == ()


def reduction_kernel() -> loop_ir.Kernel:
    i, k = ex.Var("i0"), ex.Var("r0")
    body = [loop_ir.Loop("i0", 4, "parallel", [
        loop_ir.Init("acc", ex.Const(0.0, F32)),
        loop_ir.Loop("r0", 8, "reduce", [loop_ir.Accumulate("acc", "sum", loop_ir.Load("x", (i, k), F32))]),
        loop_ir.Store("out", (i,), ex.Var("acc", F32)),
    ])]
    return loop_ir.Kernel("row_sum", [loop_ir.Buffer("x", TensorType((4, 8), F32))],
                          [loop_ir.Buffer("out", TensorType((4,), F32))], body)


def test_applies_to_parallel_loops_around_stores_only():
    assert SCHEDULE.applies(silu_up((3, 5)).kernel, SM_90)
    assert SCHEDULE.applies(rope(1, 3, 10).kernel, SM_90)
    assert not SCHEDULE.applies(reduction_kernel(), SM_90)
    with pytest.raises(ScheduleError, match="not pointwise"):
        SCHEDULE.schedule(reduction_kernel(), SM_90, {})


def test_elementwise_programs_get_the_pointwise_schedule_and_matmuls_keep_theirs(silu_up_program):
    assert [t.schedule for t in silu_up_program.compilation.tiles] == ["pointwise"]
    matmul = lamina.compile(lambda a, b: a @ b, (torch.randn(8, 16), torch.randn(16, 8)))
    assert [t.schedule for t in matmul.compilation.tiles] == ["contraction"]


@pytest.mark.parametrize("knobs,message", [
    ({"vector_width": 3}, "vector_width = 3 is not usable: it must be a power of two from 1 to 16"),
    ({"vector_width": 32}, "vector_width = 32 is not usable"),
    ({"vector_width": 8}, "vector_width = 8 does not divide the innermost extent 100"),
    ({"vectors_per_thread": 0}, "vectors_per_thread = 0 is not usable: it must be from 1 to 8"),
    ({"vectors_per_thread": 9}, "vectors_per_thread = 9 is not usable"),
    ({"vectors_per_thread": "4"}, "vectors_per_thread = '4' is not usable"),
    ({"threads": True}, "threads = True is not usable"),
    ({"threads": 48}, "threads = 48 is not usable: it must be a multiple of 32 from 32 to 512"),
    ({"threads": 1024}, "threads = 1024 is not usable"),
    ({"steps": 0}, "steps = 0 is not usable: it must be a positive number of steps"),
])
def test_unusable_pinned_knobs_are_schedule_errors(knobs, message):
    with pytest.raises(ScheduleError, match=message.replace("(", r"\(").replace(")", r"\)")):
        SCHEDULE.schedule(silu_up((7, 100)).kernel, SM_90, knobs)


def test_pinned_knobs_whose_vectors_overflow_the_registers_are_schedule_errors():
    with pytest.raises(ScheduleError, match="take 272 registers, and with the 32 the rest of the kernel needs that is "
                                            "more than the 128 a thread of a 512-thread block has"):
        SCHEDULE.schedule(silu_up((5, 48)).kernel, SM_90, {"vector_width": 16, "vectors_per_thread": 8, "threads": 512})


def test_pinned_knobs_are_what_the_tile_says():
    tile = SCHEDULE.schedule(silu_up((7, 100)).kernel, SM_90, {"vector_width": 2, "vectors_per_thread": 4, "threads": 64})
    (binding,) = tile.grid
    assert (tile.vector_width, dict(tile.knobs)["vectors_per_thread"], binding.threads) == (2, 4, 64)


def test_estimate_is_the_bytes_moved_over_the_bandwidth_plus_a_launch():
    kernel = silu_up((2048, 18944), BF16).kernel
    moved = 3 * 2048 * 18944 * 2
    expected = moved / (SM_90.memory_bytes_per_us * VECTOR_EFFICIENCY) + SM_90.launch_us
    assert SCHEDULE.estimate_cost(kernel, SM_90) == pytest.approx(expected)
    transposed = transpose((7, 100)).kernel  # x read across its rows: a 32-byte sector per 4-byte element
    assert SCHEDULE.estimate_cost(transposed, SM_90) == pytest.approx(
        700 * 4 / (SM_90.memory_bytes_per_us * SCALAR_EFFICIENCY) + 700 * 32 / SM_90.memory_bytes_per_us
        + SM_90.launch_us)


def test_a_kernel_with_no_elements_launches_one_idle_block():
    case = silu_up((0, 8))
    lowered = SCHEDULE.lower(SCHEDULE.schedule(case.kernel, SM_90, {}), SM_90)
    assert lowered.launch.grid == (1, 1, 1)
    out, report = run_on_simulator(case, lowered, case.inputs())
    assert out.shape == (0, 8) and report.faults == []


def test_the_best_settings_are_its_own_then_other_blocks_each_reproduced_by_its_knobs():
    kernel = lamina.compile(lambda a, b: torch.nn.functional.silu(a) * b,
                            (torch.randn(300, 1000), torch.randn(300, 1000))).compilation.loop.kernels[0]
    settings = SCHEDULE.best_settings(kernel, SM_90, 5)
    assert len(settings) == 5 and {s.estimate_us for s in settings} == {SCHEDULE.estimate_cost(kernel, SM_90)}
    tiles = [SCHEDULE.schedule(kernel, SM_90, dict(s.knobs)) for s in settings]
    assert tiles[0] == SCHEDULE.schedule(kernel, SM_90, {})
    assert len(set(tiles)) == 5
    for s, tile in zip(settings, tiles):
        knobs = dict(s.knobs)
        assert (tile.grid[0].threads, tile.vector_width, dict(tile.knobs)["vectors_per_thread"]) == \
            (knobs["threads"], knobs["vector_width"], knobs["vectors_per_thread"])


def cache_write() -> loop_ir.Kernel:
    """A new row of a cache stored at a loaded position, as an update written in place has it:
    the element kept where the position lies outside the cache."""
    from lamina.core.stages.update_in_place import write_updates_in_place

    i0, i1, i2 = (ex.Var(v) for v in ("i0", "i1", "i2"))
    position = loop_ir.Load("position", (ex.const(0),), dtypes.int64)
    value = ex.op("where", ex.op("eq", ex.cast(i1, dtypes.int64), position),
                  loop_ir.Load("values", (i0, ex.const(0), i2), F32), loop_ir.Load("cache", (i0, i1, i2), F32))
    body = (loop_ir.Store("new", (i0, i1, i2), value),)
    for var, extent in reversed(list(zip(("i0", "i1", "i2"), (2, 5, 8)))):
        body = (loop_ir.Loop(var, extent, "parallel", body),)
    buffers = {name: loop_ir.Buffer(name, TensorType(shape, dtype)) for name, shape, dtype in (
        ("cache", (2, 5, 8), F32), ("position", (1,), dtypes.int64), ("values", (2, 1, 8), F32),
        ("new", (2, 5, 8), F32))}
    update = loop_ir.Kernel("update", (buffers["position"], buffers["values"], buffers["cache"]), (buffers["new"],), body)
    program = loop_ir.Program((buffers["cache"], buffers["position"], buffers["values"]), (buffers["new"],), (), (update,))
    (written,) = write_updates_in_place(program, [("cache", "new")]).kernels
    return written


CACHE_WRITE_TILE = """\
tile update  schedule=pointwise
  grid (1, 1, 1) blocks of 32 threads
  parallel i0 * i2 (16): block.x tile 128 = thread.x 32 x 4 per thread (contiguous)
  vector width 4
  vectors_per_thread = 1
  steps = 1
  vector_loads = values[i0, 0, i2]
  scalar_loads = position[0]
  vector_stores = cache[i0, min(max(position[0], 0), 4), i2] if position[0] >= 0 and position[0] < 5
  conditions_per_vector = position[0] >= 0 and position[0] < 5"""

CACHE_WRITE_KERNEL = """\
kernel update  grid (1, 1, 1)  block (32, 1, 1)
  param in position: i64[1]
  param in values: f32[16]
  param out cache: f32[80]
  register values_vector: f32[1][4]
  register cache_vector: f32[1][4]
  var vector: i64 = blockIdx.x * 32 + threadIdx.x
  if vector < 4:
    var i0: i64 = vector // 2
    var i2: i64 = vector % 2 * 4
    var condition: b8 = position[0] >= 0 and position[0] < 5
    vector load x4 values_vector[0][0] <- values[vector * 4]
    cache_vector[0][0] = values_vector[0][0]
    cache_vector[0][1] = values_vector[0][1]
    cache_vector[0][2] = values_vector[0][2]
    cache_vector[0][3] = values_vector[0][3]
    if condition:
      vector store x4 cache[i0 * 40 + min(max(position[0], 0), 4) * 8 + i2] <- cache_vector[0][0]"""


def test_a_row_stored_where_its_position_lies_is_stored_under_the_condition_and_the_cache_is_not_read():
    """``cache[p] = where(p inside, row, cache[p])``: the row's loads are made at once with the
    position's, and the row is stored under the condition; outside, the cache stays as it was."""
    from lamina.backends.reference.simulator import simulate

    tile = SCHEDULE.schedule(cache_write(), SM_90, {})
    assert tile_ir.format_tile_kernel(tile) == CACHE_WRITE_TILE
    kernel = SCHEDULE.lower(tile, SM_90)
    assert kernel_ir.format_kernel(kernel) == CACHE_WRITE_KERNEL
    values = torch.randn(2, 1, 8)
    for position in (3, 0, 4, 7, -1):
        cache = torch.randn(2, 5, 8)
        expected = cache.clone()
        if 0 <= position < 5:
            expected[:, position] = values[:, 0]
        buffers = {"position": torch.tensor([position]), "values": values.flatten(), "cache": cache.view(-1)}
        report = simulate(kernel, buffers, raise_on_fault=False)
        assert not report.faults
        torch.testing.assert_close(cache, expected, rtol=0, atol=0)

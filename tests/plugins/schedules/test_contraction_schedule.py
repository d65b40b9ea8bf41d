"""The contraction schedule's decisions as printed Tile IR, its knobs, and the shape of the Kernel IR it writes."""

import pytest

from lamina.core.errors import LaminaError
from lamina.core.ir import expr as ex, kernel_ir, tile_ir
from lamina.plugins.schedules.contraction import ContractionSchedule, analyse
from lamina.plugins.schedules.contraction.copy_layout import CopyOrder, bank_conflicts, choose_copy_order
from lamina.plugins.schedules.contraction.tiling import store_width

from .contraction_kernels import SM_90, batched, linear, matmul, running_example

SCHEDULE = ContractionSchedule()

RUNNING_EXAMPLE_TILE_IR = """\
tile relu  schedule=contraction
  grid (1, 1, 1) blocks of 128 threads, 4480 B shared
  parallel i1 (16): block.x tile 16 = thread.x 8 x 2 per thread (strided by 8)
  parallel i0 (16): block.y tile 16 = thread.y 8 x 2 per thread (strided by 8)
  reduce r0 (64): block_tree, step 16, 2 splits
  shared x[i0, r0] as f32[r0 16][i0 16 + pad 2], 2 buffers, copy cp.async 4 B
  shared bias[r0] as f32[r0 16, no pad], 2 buffers, copy cp.async 16 B
  shared w[r0, i1] as f32[r0 16][i1 16, no pad], 2 buffers, copy cp.async 16 B
  register_tile = 2x2
  fragment_width = 1 (4-byte shared-memory reads)
  epilogue_stores = one output per store (4 B)
  combine = 2 k-splits add up in a tree through shared f32[4][128]
  chosen = block 16x16x16, thread 2x2, in-block k-splits 2, buffers 2, fragment width 1; cheapest of 2 settings, pinned: none
  estimate = 3.5 us from launch 2.0, compute 1.1 and memory 1.2, overlapped; 1 blocks, 10 per SM at once
  warp_tile = 4x8 threads, reading 24 operand elements per step of k
  block_order = 1x1 blocks, 1320 at once: along x first, in CUDA's order
  copy x[i0, r0] = r0 fastest across threads
  copy bias[r0] = r0 fastest across threads, 4 elements per copy
  copy w[r0, i1] = i1 fastest across threads, 4 elements per copy"""


def test_running_example_tile_ir():
    assert tile_ir.format_tile_kernel(SCHEDULE.schedule(running_example().kernel, SM_90, {})) == RUNNING_EXAMPLE_TILE_IR


def test_batched_grid_and_pinned_blocks():
    tile = SCHEDULE.schedule(batched(6, 70, 24, 100).kernel, SM_90, {"block_m": 64, "block_n": 16, "block_k": 8})
    assert tile.grid_shape() == {"x": 7, "y": 2, "z": 6}
    assert [(b.vars, b.threads, b.per_thread) for b in tile.grid] == [(("i2",), 8, 2), (("i1",), 32, 2), (("i0",), 1, 1)]
    assert tile.reduction.step == 8
    assert [(s.tile, s.padded_shape, s.copy_bytes) for s in tile.stages] == [
        ((8, 64), (2, 8, 65), 4),
        ((8, 16), (2, 8, 16), 16),
    ]
    assert ("register_tile", "2x2") in tile.knobs


def test_one_k_tile_needs_no_second_buffer_unless_pinned():
    kernel = matmul(20, 16, 20).kernel
    assert {s.buffers for s in SCHEDULE.schedule(kernel, SM_90, {}).stages} == {1}
    assert {s.buffers for s in SCHEDULE.schedule(kernel, SM_90, {"buffers": 2}).stages} == {2}


def test_knobs_of_other_schedules_are_ignored():
    tile = SCHEDULE.schedule(running_example().kernel, SM_90, {"vector_width": 4})
    assert tile_ir.format_tile_kernel(tile) == RUNNING_EXAMPLE_TILE_IR


BAD_KNOBS = {
    "block_m_not_a_multiple_of_thread_m": (
        {"block_m": 24, "thread_m": 5},
        r"no setting with block_m = 24, thread_m = 5 can run: no block tile is a whole number of register tiles",
    ),
    "block_n_zero": ({"block_n": 0}, r"block_n = 0 must be positive"),
    "block_k_negative": ({"block_k": -4}, r"block_k = -4 must be positive"),
    "padding_negative": ({"padding": -1}, r"padding = -1 must be 0 or more"),
    "four_buffers": ({"buffers": 4}, r"buffers = 4 must be 1 .*, 2 .* or 3"),
    "fragment_width_two": ({"fragment_width": 2}, r"fragment_width = 2 must be 1 .* or 4 .*16 bytes at a time"),
    "fragment_width_four_of_a_2x2_tile": (
        {"fragment_width": 4, "thread_m": 2, "thread_n": 2},
        r"fragment_width = 4 needs register tiles whose sides are multiples of 4",
    ),
    "too_many_registers": (
        {"block_m": 128, "block_n": 128, "thread_m": 16, "thread_n": 16},
        r"about 321 registers per thread exceed 255",
    ),
    "not_an_integer": ({"block_k": "16"}, r"block_k must be an integer, not '16'"),
    "boolean": ({"padding": True}, r"padding must be an integer"),
    "too_much_shared_memory": (
        {"block_m": 128, "block_n": 256, "block_k": 64, "buffers": 3, "thread_m": 8, "thread_n": 8, "in_block_k_splits": 1,
         "fragment_width": 4},
        r"can run: 298752 B of shared memory exceed the 232448 B sm_90 allows per block. "
        r"Pin other values, or unpin some of these knobs",
    ),
}


@pytest.mark.parametrize("name", BAD_KNOBS)
def test_bad_knobs_are_clear_errors(name):
    knobs, message = BAD_KNOBS[name]
    with pytest.raises(LaminaError, match=message) as caught:
        SCHEDULE.schedule(running_example().kernel, SM_90, knobs)
    assert "kernel relu" in str(caught.value)


def statements(kernel):
    return list(kernel_ir.statements(kernel.body))


def test_kernel_ir_of_the_running_example():
    kernel = SCHEDULE.lower(SCHEDULE.schedule(running_example().kernel, SM_90, {}), SM_90)
    assert (kernel.launch.grid, kernel.launch.block) == ((1, 1, 1), (8, 8, 2))
    arrays = {a.name: (a.space, a.shape) for a in kernel.arrays}
    assert arrays == {
        "x_tile": ("shared", (2, 16, 18)),
        "bias_tile": ("shared", (2, 16)),
        "w_tile": ("shared", (2, 16, 16)),
        "partial": ("shared", (4, 128)),
        "acc": ("register", (2, 2)),
        "x_reg": ("register", (2,)),
        "bias_reg": ("register", (1,)),
        "w_reg": ("register", (2,)),
    }
    body = statements(kernel)
    assert [s.pending for s in body if isinstance(s, kernel_ir.CpAsyncWait)] == [0]
    assert sum(isinstance(s, kernel_ir.Barrier) for s in body) == 1 + 1
    copies = [s for s in body if isinstance(s, kernel_ir.CpAsync)]
    assert sorted((c.dst, c.bytes) for c in copies) == sorted(2 * [("x_tile", 4), ("bias_tile", 16), ("w_tile", 16)])
    (compute,) = [s for s in body if isinstance(s, kernel_ir.For) and s.unroll and s.var == "kk"]
    assert (compute.start, compute.stop) == (ex.const(0), ex.const(8))
    updates = [s for s in compute.body if isinstance(s, kernel_ir.Store) and s.array == "acc"]
    assert [kernel_ir.format_expr(u.value) for u in updates[:1]] == ["acc[0][0] + (x_reg[0] + bias_reg[0]) * w_reg[0]"]
    assert len(updates) == 4


def test_three_buffers_keep_two_k_tiles_in_flight():
    kernel = SCHEDULE.lower(SCHEDULE.schedule(matmul(17, 65, 19).kernel, SM_90, {"buffers": 3}), SM_90)
    assert sorted(s.pending for s in statements(kernel) if isinstance(s, kernel_ir.CpAsyncWait)) == [0, 1]
    assert {a.shape[0] for a in kernel.arrays if a.name.endswith("_tile")} == {3}


@pytest.mark.parametrize("buffers", [2, 3])
def test_several_buffers_take_one_barrier_per_k_tile_and_refill_after_it(buffers):
    """The barrier that makes k-tile kt visible also ends every thread's reads of kt - 1, so the
    copy into that slot can start right after it, and no second barrier is needed."""
    kernel = SCHEDULE.lower(SCHEDULE.schedule(matmul(17, 65, 19).kernel, SM_90, {"buffers": buffers}), SM_90)
    (loop,) = [s for s in statements(kernel) if isinstance(s, kernel_ir.For) and s.var == "kt"]
    kinds = [type(s).__name__ for s in loop.body]
    assert kinds.count("Barrier") == 1
    refill = loop.body[kinds.index("Barrier") + 1]
    assert kernel_ir.format_expr(refill.cond) == f"kt + {buffers - 1} < 5"
    assert any(isinstance(s, kernel_ir.CpAsync) for s in kernel_ir.statements(refill.then))


def test_one_buffer_waits_for_every_copy():
    kernel = SCHEDULE.lower(SCHEDULE.schedule(running_example().kernel, SM_90, {"buffers": 1}), SM_90)
    assert [s.pending for s in statements(kernel) if isinstance(s, kernel_ir.CpAsyncWait)] == [0]
    assert {a.shape[0] for a in kernel.arrays if a.name.endswith("_tile")} == {1}


def test_ragged_reduction_guards_the_last_k_tile():
    kernel = SCHEDULE.lower(SCHEDULE.schedule(matmul(17, 65, 19).kernel, SM_90, {"in_block_k_splits": 1}), SM_90)
    (compute,) = [s for s in statements(kernel) if isinstance(s, kernel_ir.For) and s.var == "kk"]
    assert [kernel_ir.format_expr(s.cond) for s in compute.body] == ["kt * 16 + kk < 65"]


def test_lowering_refuses_another_schedules_tile():
    tile = SCHEDULE.schedule(running_example().kernel, SM_90, {})
    with pytest.raises(LaminaError, match="scheduled by 'generic'"):
        SCHEDULE.lower(tile_ir.TileKernel(tile.kernel, "generic", tile.grid, tile.reduction, tile.stages), SM_90)


def test_k_major_copy_of_a_row_major_operand_interleaves_a_warps_rows():
    plain, interleaved = CopyOrder(0), CopyOrder(0, interleaved=True)
    assert bank_conflicts(plain, (16, 32), 1, 4) > 0
    assert bank_conflicts(interleaved, (16, 32), 1, 4) == 0
    assert bank_conflicts(interleaved, (16, 32), 0, 4) > 0
    assert choose_copy_order((16, 32), 1, 4, contiguous=0) == interleaved
    assert choose_copy_order((16, 32), 1, 4, contiguous=1) == CopyOrder(1)
    assert choose_copy_order((32, 32), 1, 4, contiguous=0) == plain


def test_runs_of_four_columns_are_stored_at_once_only_where_every_run_is_aligned():
    assert store_width(analyse(linear(9, 33, 20, bias_relu=True).kernel), 4) == 4
    assert store_width(analyse(linear(9, 33, 20).kernel), 1) == 1
    assert store_width(analyse(matmul(17, 65, 19).kernel), 4) == 1
    assert store_width(analyse(batched(3, 9, 24, 20).kernel), 4) == 4
    assert store_width(analyse(batched(3, 9, 24, 18).kernel), 4) == 1

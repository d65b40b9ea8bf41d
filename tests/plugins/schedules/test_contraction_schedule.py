"""The contraction schedule's decisions as printed Tile IR, its knobs, and the shape of the Kernel IR it writes."""

import pytest

from lamina.core.errors import LaminaError
from lamina.core.ir import kernel_ir, tile_ir
from lamina.plugins.schedules.contraction import ContractionSchedule
from lamina.plugins.schedules.contraction.copy_layout import CopyOrder, bank_conflicts, choose_copy_order

from .contraction_kernels import SM_90, batched, matmul, running_example

SCHEDULE = ContractionSchedule()

RUNNING_EXAMPLE_TILE_IR = """\
tile relu  schedule=contraction
  grid (1, 1, 1) blocks of 256 threads, 8576 B shared
  parallel i1 (16): block.x tile 32 = thread.x 16 x 2 per thread (contiguous)
  parallel i0 (16): block.y tile 32 = thread.y 16 x 2 per thread (contiguous)
  reduce r0 (64): serial, step 16
  shared x[i0, r0] as f32[r0 16][i0 32 + pad 1], 2 buffers, copy cp.async 4 B
  shared bias[r0] as f32[r0 16, no pad], 2 buffers, copy cp.async 4 B
  shared w[r0, i1] as f32[r0 16][i1 32 + pad 1], 2 buffers, copy cp.async 4 B
  register_tile = 2x2
  copy x[i0, r0] = r0 fastest across threads, a warp's i0 16 apart
  copy bias[r0] = r0 fastest across threads
  copy w[r0, i1] = i1 fastest across threads"""


def test_running_example_tile_ir():
    assert tile_ir.format_tile_kernel(SCHEDULE.schedule(running_example().kernel, SM_90, {})) == RUNNING_EXAMPLE_TILE_IR


def test_batched_grid_and_pinned_blocks():
    tile = SCHEDULE.schedule(batched(6, 70, 24, 100).kernel, SM_90, {"block_m": 64, "block_n": 16, "block_k": 8})
    assert tile.grid_shape() == {"x": 7, "y": 2, "z": 6}
    assert [(b.vars, b.per_thread) for b in tile.grid] == [(("i2",), 1), (("i1",), 4), (("i0",), 1)]
    assert tile.reduction.step == 8
    assert [(s.tile, s.padded_shape) for s in tile.stages] == [((8, 64), (2, 8, 65)), ((8, 16), (2, 8, 17))]
    assert ("register_tile", "4x1") in tile.knobs


def test_one_k_tile_needs_no_second_buffer_unless_pinned():
    kernel = matmul(20, 16, 20).kernel
    assert {s.buffers for s in SCHEDULE.schedule(kernel, SM_90, {}).stages} == {1}
    assert {s.buffers for s in SCHEDULE.schedule(kernel, SM_90, {"buffers": 2}).stages} == {2}


def test_knobs_of_other_schedules_are_ignored():
    tile = SCHEDULE.schedule(running_example().kernel, SM_90, {"vector_width": 4})
    assert tile_ir.format_tile_kernel(tile) == RUNNING_EXAMPLE_TILE_IR


BAD_KNOBS = {
    "block_m_not_a_multiple_of_threads": ({"block_m": 24}, r"block_m = 24 must be a positive multiple of the 16 threads"),
    "block_n_zero": ({"block_n": 0}, r"block_n = 0 must be a positive multiple"),
    "block_k_negative": ({"block_k": -4}, r"block_k = -4 must be positive"),
    "padding_negative": ({"padding": -1}, r"padding = -1 must be 0 or more"),
    "three_buffers": ({"buffers": 3}, r"buffers = 3 must be 1 .* or 2"),
    "not_an_integer": ({"block_k": "16"}, r"block_k must be an integer, not '16'"),
    "boolean": ({"padding": True}, r"padding must be an integer"),
    "too_much_shared_memory": (
        {"block_m": 256, "block_n": 256, "block_k": 64, "buffers": 2},
        r"with 2 buffer\(s\) need 263680 B of shared memory; sm_90 allows 232448 B per block. "
        r"Pin smaller blocks or buffers = 1",
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
    assert (kernel.launch.grid, kernel.launch.block) == ((1, 1, 1), (16, 16, 1))
    arrays = {a.name: (a.space, a.shape) for a in kernel.arrays}
    assert arrays == {
        "x_tile": ("shared", (2, 16, 33)),
        "bias_tile": ("shared", (2, 16)),
        "w_tile": ("shared", (2, 16, 33)),
        "acc": ("register", (2, 2)),
        "x_reg": ("register", (2,)),
        "bias_reg": ("register", (1,)),
        "w_reg": ("register", (2,)),
    }
    body = statements(kernel)
    assert sorted(s.pending for s in body if isinstance(s, kernel_ir.CpAsyncWait)) == [0, 1]
    assert sum(isinstance(s, kernel_ir.Barrier) for s in body) == 2
    copies = [s for s in body if isinstance(s, kernel_ir.CpAsync)]
    assert len(copies) == 6 and all(c.predicate is not None for c in copies if c.dst != "bias_tile")
    (compute,) = [s for s in body if isinstance(s, kernel_ir.For) and s.unroll and s.var == "kk"]
    updates = [s for s in compute.body if isinstance(s, kernel_ir.Store) and s.array == "acc"]
    assert [kernel_ir.format_expr(u.value) for u in updates[:1]] == ["acc[0][0] + (x_reg[0] + bias_reg[0]) * w_reg[0]"]
    assert len(updates) == 4


def test_one_buffer_waits_for_every_copy():
    kernel = SCHEDULE.lower(SCHEDULE.schedule(running_example().kernel, SM_90, {"buffers": 1}), SM_90)
    assert [s.pending for s in statements(kernel) if isinstance(s, kernel_ir.CpAsyncWait)] == [0]
    assert {a.shape[0] for a in kernel.arrays if a.space == "shared"} == {1}


def test_ragged_reduction_guards_the_last_k_tile():
    kernel = SCHEDULE.lower(SCHEDULE.schedule(matmul(17, 65, 19).kernel, SM_90, {}), SM_90)
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

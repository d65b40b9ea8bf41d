"""The cost model's choices: large tiles for large shapes, k-splits for decoding, pinned knobs obeyed."""

import pytest

from lamina.backends.cuda.codegen import emit_cuda, kernel_symbol
from lamina.backends.cuda.nvrtc import compile_kernel
from lamina.backends.cuda.wgmma import kernel_arch
from lamina.bench.measure import float64_reference, relative_error
from lamina.core.errors import ScheduleError
from lamina.core.ir import dtypes, kernel_ir, tile_ir
from lamina.plugins.schedules.contraction import ContractionSchedule, analyse, candidates, estimate
from lamina.plugins.schedules.contraction.cost import choose, cuda_core_floor_us, floor_of_work_us, products, ranked
from lamina.plugins.selection.cost_model import CostModelPolicy

from ..contraction_kernels import FMA, SM_90, linear, matmul, simulate_case
from .test_wgmma_tma import linear16

SCHEDULE = ContractionSchedule()
QWEN_QKV = linear(2048, 3584, 4608)
QWEN_GATE_UP_DECODE = linear(1, 3584, 37888)


def chosen(case, pinned=None):
    return choose(analyse(case.kernel), SM_90, pinned or {}, "test")[0]


def test_large_shapes_get_large_block_and_register_tiles():
    choices = chosen(QWEN_QKV, FMA)
    assert (choices.thread_m, choices.thread_n) == (8, 8)
    assert choices.block_m * choices.block_n >= 64 * 128
    assert choices.splits == 1


def test_decoding_splits_k_inside_the_block():
    choices = chosen(QWEN_GATE_UP_DECODE)
    assert choices.block_m == 1 and choices.splits > 1


def test_small_register_tiles_are_estimated_slower_on_large_shapes():
    c = analyse(QWEN_QKV.kernel)
    by_tile = {}
    for setting in candidates(c, SM_90):
        time = estimate(c, setting, SM_90).total_us
        key = setting.thread_m * setting.thread_n
        by_tile[key] = min(time, by_tile.get(key, time))
    assert by_tile[4] > by_tile[16] > by_tile[64]


def test_a_pinned_knob_wins():
    choices = chosen(QWEN_QKV, {"thread_m": 4, "thread_n": 4, "block_k": 8})
    assert (choices.thread_m, choices.thread_n, choices.block_k) == (4, 4, 8)
    assert all(s.block_k == 8 for s in candidates(analyse(QWEN_QKV.kernel), SM_90, {"block_k": 8}))


def test_pinned_knobs_outside_the_usual_ranges_are_still_legal_settings():
    choices = chosen(matmul(17, 65, 19), {"block_m": 48, "thread_m": 3})
    assert (choices.block_m, choices.thread_m) == (48, 3)


def test_pins_that_leave_nothing_legal_say_why():
    with pytest.raises(ScheduleError, match="block_n = 128 can run: about .* registers per thread exceed 255"):
        chosen(QWEN_QKV, {"thread_m": 16, "thread_n": 16, "block_m": 128, "block_n": 128})


def test_blocks_whose_threads_together_need_more_registers_than_a_block_has_are_not_chosen():
    """1024 threads may hold 64 registers each; a 4x16 register tile needs about twice that."""
    pins = {"block_m": 128, "block_n": 512, "thread_m": 4, "thread_n": 16, "in_block_k_splits": 1}
    with pytest.raises(ScheduleError, match="about .* registers for each of 1024 threads exceed the 65536 a block may have"):
        chosen(QWEN_QKV, pins)
    assert chosen(QWEN_QKV, {**pins, "block_m": 64}).threads == 512


def test_tile_ir_prints_the_choice_and_its_estimate():
    knobs = dict(SCHEDULE.schedule(QWEN_QKV.kernel, SM_90, {}).knobs)
    assert knobs["chosen"].endswith("pinned: none")
    assert knobs["estimate"].startswith(f"{SCHEDULE.estimate_cost(QWEN_QKV.kernel, SM_90):.1f} us from launch 2.0")
    tile = SCHEDULE.schedule(QWEN_QKV.kernel, SM_90, {"in_block_k_splits": 1})
    assert dict(tile.knobs)["chosen"].endswith("pinned: in_block_k_splits=1")
    assert "dynamic" not in tile_ir.format_tile_kernel(tile)


def test_the_estimate_grows_with_the_work():
    small = SCHEDULE.estimate_cost(linear(128, 3584, 4608).kernel, SM_90)
    assert SM_90.launch_us < small < SCHEDULE.estimate_cost(QWEN_QKV.kernel, SM_90)


def test_the_choice_for_a_ragged_shape_matches_pytorch():
    case = matmul(33, 100, 45)
    kernel = SCHEDULE.lower(SCHEDULE.schedule(case.kernel, SM_90, {}), SM_90)
    inputs = case.inputs()
    out, report = simulate_case(case, kernel, inputs)
    assert relative_error(out, float64_reference(case.reference, tuple(inputs.values()))) < 1e-5
    assert (report.races, report.out_of_bounds, report.unwritten_reads, report.misaligned) == ([], [], [], [])
    assert report.total_bank_conflicts == 0


class _Unestimated:
    name = "unestimated"


def test_the_selection_policy_prefers_the_estimated_contraction():
    assert CostModelPolicy().choose(QWEN_QKV.kernel, [_Unestimated(), SCHEDULE], SM_90) is SCHEDULE


@pytest.mark.parametrize("case", [QWEN_QKV, linear(128, 3584, 4608), QWEN_GATE_UP_DECODE], ids=["2048", "128", "1"])
def test_the_choices_for_model_shapes_compile_without_spills(case):
    kernel = SCHEDULE.lower(SCHEDULE.schedule(case.kernel, SM_90, {}), SM_90)
    compiled = compile_kernel(emit_cuda(kernel), kernel_symbol(kernel), kernel_arch(kernel, "sm_90"))
    assert (compiled.spill_stores, compiled.spill_loads) == (0, 0)


QWEN_QKV_TILE_IR = """\
tile linear  schedule=contraction
  grid (36, 32, 1) blocks of 128 threads, 25600 B shared
  parallel i1 (4608): block.x tile 128 = thread.x 16 x 8 per thread (grouped by 4, groups 64 apart)
  parallel i0 (2048): block.y tile 64 = thread.y 8 x 8 per thread (grouped by 4, groups 32 apart)
  reduce r0 (3584): serial, step 16
  shared x[i0, r0] as f32[r0 16][i0 64 + pad 4], 2 buffers, copy cp.async 4 B
  shared w[i1, r0] as f32[r0 16][i1 128 + pad 4], 2 buffers, copy cp.async 4 B
  warps of 4 x 8 threads (y by x)
  blocks run down groups of 22 grid rows, column by column
  the next k-tile's copies issued over the first 8 steps of each k-tile
  register_tile = 8x8
  fragment_width = 4 (16-byte shared-memory reads)
  epilogue_stores = 4 adjacent outputs per store (16 B)
  chosen = block 64x128x16, thread 8x8, in-block k-splits 1, buffers 2, fragment width 4, copies over 8 steps; cheapest of 41 settings, pinned: products=fma
  estimate = 1629.7 us from launch 2.0, compute 1439.8 and memory 751.4, overlapped; 1152 blocks, 4 per SM at once
  warp_tile = 4x8 threads, reading 96 operand elements per step of k (CUDA's 2x16: 144)
  block_order = 32x36 blocks, 528 at once: down groups of 22 rows
  copy x[i0, r0] = r0 fastest across threads, a warp's 8 r0 by 4 i0
  copy w[i1, r0] = r0 fastest across threads, a warp's 8 r0 by 4 i1"""


def test_tile_ir_of_the_qwen_qkv_projection_on_fmas():
    assert tile_ir.format_tile_kernel(SCHEDULE.schedule(QWEN_QKV.kernel, SM_90, FMA)) == QWEN_QKV_TILE_IR


def test_register_tiles_in_fours_are_read_16_bytes_at_a_time_and_estimated_faster():
    c = analyse(QWEN_QKV.kernel)
    wide = chosen(QWEN_QKV, FMA)
    narrow = chosen(QWEN_QKV, {"fragment_width": 1, "block_m": wide.block_m, "block_n": wide.block_n})
    assert (wide.fragment_width, narrow.fragment_width) == (4, 1)
    assert estimate(c, wide, SM_90).compute_us < estimate(c, narrow, SM_90).compute_us
    kernel = SCHEDULE.lower(SCHEDULE.schedule(QWEN_QKV.kernel, SM_90, FMA), SM_90)
    (compute,) = [s for s in kernel_ir.statements(kernel.body) if isinstance(s, kernel_ir.For) and s.var == "kk"]
    reads = [s for s in compute.body if isinstance(s, kernel_ir.VectorLoad)]
    assert [(s.src, s.width) for s in reads] == 2 * [("x_tile", 4)] + 2 * [("w_tile", 4)]
    assert not any(isinstance(s, kernel_ir.Store) and s.array.endswith("_reg") for s in compute.body)
    stores = [s for s in kernel_ir.statements(kernel.body) if isinstance(s, kernel_ir.VectorStore)]
    assert len(stores) == 8 * 2 and {(s.dst, s.width) for s in stores} == {("out", 4)}


def test_a_padding_that_breaks_the_alignment_falls_back_to_single_reads():
    assert chosen(QWEN_QKV, {"padding": 1}).fragment_width == 1
    assert chosen(QWEN_QKV, {"padding": 8}).fragment_width == 4


@pytest.mark.parametrize("knobs, message", [
    ({"fragment_width": 4, "padding": 1}, "padding = 1 would misalign the rows that fragment_width = 4 reads"),
    ({"fragment_width": 4, "thread_m": 2, "thread_n": 2}, "needs register tiles whose sides are multiples of 4"),
])
def test_fragment_widths_that_cannot_run_say_why(knobs, message):
    with pytest.raises(ScheduleError, match=message):
        chosen(QWEN_QKV, knobs)


def test_cp_async_copies_take_two_buffers_and_copies_through_registers_three():
    """One k-tile in flight hides a cp.async copy; 2-byte elements, loaded through registers,
    measured faster with two in flight; a single k-tile needs one buffer (``default_buffers``)."""
    assert chosen(matmul(2048, 2048, 2048)).buffers == 2
    assert chosen(matmul(2048, 2048, 2048, dtype=dtypes.bfloat16)).buffers == 3
    assert chosen(matmul(2048, 16, 2048, dtype=dtypes.bfloat16)).buffers == 1


@pytest.mark.parametrize("case", [linear16(128, 2048, 2560), linear16(2048, 3584, 4608), linear16(64, 64, 64),
                                  linear(512, 768, 3072), linear(3, 40, 5)],
                         ids=["bf16_128_rows", "bf16_qwen_qkv", "bf16_one_tile", "fp32", "fp32_tiny"])
def test_leaving_out_the_cuda_cores_settings_never_changes_the_choice(case):
    """``choose`` skips the CUDA cores' settings where a wgmma setting is cheaper than any of them could
    be; the choice is the cheapest of every setting all the same."""
    c = analyse(case.kernel, joined=True).hinted()
    choices, estimate_, _ = choose(c, SM_90, {}, "test")
    (best, best_estimate), *_ = ranked(c, SM_90, {}, "test")
    assert (choices, estimate_) == (best, best_estimate)
    assert all(estimate(c, s, SM_90).total_us >= cuda_core_floor_us(c, SM_90)
               for s in candidates(c, SM_90) if s.products in ("fma", "mma_sync"))


@pytest.mark.parametrize("case", [linear16(128, 2048, 2560), linear16(2048, 3584, 4608), linear16(64, 64, 64),
                                  linear16(1, 3584, 4608), linear(512, 768, 3072), linear(3, 40, 5)],
                         ids=["bf16_128_rows", "bf16_qwen_qkv", "bf16_one_tile", "bf16_one_row", "fp32", "fp32_tiny"])
def test_no_setting_is_estimated_below_the_floor(case):
    """The split-K search skips a slice count whose partial sums cannot pay at ``floor_of_work_us``:
    so no setting of any product may be estimated below it."""
    c = analyse(case.kernel, joined=True).hinted()
    floor = floor_of_work_us(products(c), sum(c.buffer_bytes(s.buffer) for s in c.epilogue), SM_90)
    assert floor > SM_90.launch_us
    assert all(estimate(c, s, SM_90).total_us >= floor for s in candidates(c, SM_90))


def test_a_16_bit_linear_on_hopper_weighs_only_the_wgmma_settings_and_the_tile_ir_says_so():
    c = analyse(linear16(128, 2048, 2560).kernel, joined=True).hinted()
    _, _, weighed = choose(c, SM_90, {}, "test")
    every = candidates(c, SM_90)
    assert weighed == sum(s.products == "wgmma_tma" for s in every) < len(every)
    text = tile_ir.format_tile_kernel(SCHEDULE.schedule(linear16(128, 2048, 2560).kernel, SM_90, {}))
    assert f"cheapest of {weighed} settings (the CUDA cores', at least " in text

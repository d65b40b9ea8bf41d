"""Split-K: which contractions the rule splits, and how the two kernels read in Loop IR and Tile IR."""

import attrs
import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.core.errors import ScheduleError
from lamina.core.ir import loop_ir
from lamina.core.stages.fuse import fuse
from lamina.plugins.schedules.contraction import cost, schedule
from lamina.plugins.schedules.contraction.recognise import analyse
from lamina.plugins.schedules.contraction.slices import SLICE_MULTIPLE
from lamina.plugins.schedules.contraction.split_k import fusion_rule as split_k
from lamina.plugins.schedules.contraction.split_k.partial_sums import PartialOf, partial_of, split
from lamina.plugins.schedules.contraction.split_k.fusion_rule import (
    MAX_PARTIAL_BYTES,
    SplitContractionsAcrossBlocks,
    choose,
    usable_splits,
)

from ..contraction_kernels import FMA, SM_90, linear

RULE = SplitContractionsAcrossBlocks()
FOUR_SMS = attrs.evolve(SM_90, name="four_sms", sm_count=4, **{
    rate: getattr(SM_90, rate) * 4 / SM_90.sm_count
    for rate in ("fp32_flops_per_us", "memory_bytes_per_us", "tf32_tensor_flops_per_us", "tf32_wgmma_flops_per_us")})
"""Four SMs of an H200: small shapes leave most of it idle, as M = 128 leaves the whole H200."""


def linear_bias(x, w, b):
    return F.linear(x, w, b)


def inputs(m, k, n):
    torch.manual_seed(0)
    return torch.randn(m, k), torch.randn(n, k), torch.randn(n)


SPLIT_LOOP_IR = """\
loop_program(x: f32[5, 96], w: f32[24, 96], b: f32[24]) -> (linear: f32[5, 24]):
  buffer linear_partials: f32[3, 5, 24]
  kernel linear_partials(x: f32[5, 96], w: f32[24, 96]) -> (linear_partials: f32[3, 5, 24]):
    for s in parallel(3):
      for i0 in parallel(5):
        for i1 in parallel(24):
          acc0: f32 = 0.0
          for r0 in reduce(32):
            acc0 += x[i0, s * 32 + r0] * w[i1, s * 32 + r0]
          linear_partials[s, i0, i1] = acc0
  kernel linear(linear_partials: f32[3, 5, 24], b: f32[24]) -> (linear: f32[5, 24]):
    for i0 in parallel(5):
      for i1 in parallel(24):
        acc0: f32 = 0.0
        for s in reduce(3):
          acc0 += linear_partials[s, i0, i1]
        linear[i0, i1] = acc0 + b[i1]"""


@pytest.fixture(scope="module")
def split_linear():
    return lamina.compile(linear_bias, inputs(5, 96, 24), knobs={"contraction.split_k": 3}).compilation


def test_a_pinned_split_prints_the_partial_and_the_combine_kernel(split_linear):
    assert split_linear.ir("loop") == SPLIT_LOOP_IR


def test_the_partial_kernels_tile_ir_says_who_adds_it_up(split_linear):
    partial, combine = split_linear.tiles
    assert ("split_k", "3 (partial sums, added up by the kernel that reads linear_partials)") in partial.knobs
    assert partial.schedule == "contraction" and [b.vars for b in partial.grid][-1] == ("s",)
    combine_knobs = dict(combine.knobs)
    assert combine.schedule == "unrolled_reduction" and combine.vector_width == 4
    assert combine_knobs["unrolled"] == "reduce s (3) written out: 3 reads per output"
    assert combine_knobs["vector_loads"] == (
        "linear_partials[0, i0, i1], linear_partials[1, i0, i1], linear_partials[2, i0, i1], b[i1]"
    )


def unsplit_program(m, k, n):
    return lamina.compile(linear_bias, inputs(m, k, n), knobs={"contraction.split_k": 1}).compilation.loop


def test_how_many_slices_depends_on_the_device():
    program = unsplit_program(32, 512, 32)
    (kernel,) = program.kernels
    for target, splits in ((SM_90, 32), (FOUR_SMS, 16)):
        partial, combine = RULE.apply(program, target, FMA).kernels
        assert partial_of(partial) == PartialOf(splits, "linear") and combine.name == "linear"
        assert choose(kernel, target, FMA).splits == splits
    assert choose(unsplit_program(128, 256, 128).kernels[0], FOUR_SMS, FMA) is None


def test_the_rule_never_splits_its_own_partial_kernel_and_the_driver_settles():
    program = unsplit_program(32, 512, 32)
    once = RULE.apply(program, FOUR_SMS, {})
    assert RULE.apply(once, FOUR_SMS, {}) is None
    assert RULE.apply(once, FOUR_SMS, {"split_k": 2}) is None
    assert fuse(program, [RULE], FOUR_SMS, {}) == once


def test_split_k_1_never_splits():
    assert RULE.apply(unsplit_program(32, 512, 32), FOUR_SMS, {"split_k": 1}) is None


@pytest.mark.parametrize("value, message", [
    (5, r"knob split_k = 5 does not cut the reduction of 96 into slices of whole multiples of 16, none of them "
        r"empty; pin one of: 2, 3, 6, or 1 to never split"),
    (0, r"knob split_k = 0 must be a positive integer \(1: never split\)"),
    ("8", r"knob split_k = '8' must be a positive integer"),
])
def test_an_unusable_split_k_says_what_to_pin(value, message):
    with pytest.raises(ScheduleError, match=message):
        lamina.compile(linear_bias, inputs(5, 96, 24), knobs={"contraction.split_k": value}).compilation


def test_a_pinned_split_that_no_setting_can_run_says_why():
    with pytest.raises(ScheduleError, match=r"knob split_k = 2 leaves the partial sums no setting: kernel "
                                            r"linear_partials, .* block_k = 32 must divide 16"):
        lamina.compile(linear_bias, inputs(5, 80, 24), knobs={"contraction": {"split_k": 2, "block_k": 32}}).compilation


def test_usable_splits_cut_k_into_whole_k_tiles_none_of_them_empty():
    assert usable_splits(96) == [2, 3, 6]
    assert usable_splits(80) == [2, 3, 5]
    assert usable_splits(2048)[:3] == [2, 3, 4] and 14 not in usable_splits(2048)


UNEQUAL_LOOP_IR = """\
  kernel linear_partials(x: f32[5, 80], w: f32[24, 80]) -> (linear_partials: f32[2, 5, 24]):
    for s in parallel(2):
      for i0 in parallel(5):
        for i1 in parallel(24):
          acc0: f32 = 0.0
          for r0 in reduce(48):
            acc0 += where(s * 48 + r0 < 80, x[i0, min(s * 48 + r0, 79)] * w[i1, min(s * 48 + r0, 79)], 0.0)
          linear_partials[s, i0, i1] = acc0"""


def test_slices_that_cannot_be_equal_guard_the_last_one_and_its_tile_ir_says_where_it_ends():
    compilation = lamina.compile(linear_bias, inputs(5, 80, 24), knobs={"contraction.split_k": 2}).compilation
    assert UNEQUAL_LOOP_IR in compilation.ir("loop")
    partial = compilation.tiles[0]
    assert dict(partial.knobs)["slice_end"] == "r0 runs while s * 48 + r0 < 80: a shorter slice ends at a k-tile sooner"
    assert "int slice_k_tiles = min(-(batch * 3) + 5, 3);" in compilation.sources["linear_partials"]


# --- the cost model's decisions on the H200 -----------------------------------------------

def test_tinyllama_qkv_at_128_rows_splits():
    """13 slices (ten k-tiles, the last eight) of 20 blocks of 128 x 128 make 260 blocks, two
    for each of the H200's SMs; 16 equal slices of 40 blocks of 64 x 128 make 640."""
    choice = choose(linear(128, 2048, 2560).kernel, SM_90, FMA)
    assert choice.splits == 13
    assert choice.split_us < 0.9 * choice.unsplit_us


def test_tinyllama_gate_up_at_128_rows_takes_three_unequal_slices():
    """88 blocks of 128 x 128 in 3 slices of 43, 43 and 42 k-tiles fill the 264 places once;
    K = 2048 padded to 3 equal slices ran 146 us on the H200 against 168 us for the
    4 equal slices the rule took before (``2026-11-30_h200_split_k_padded_emulation.json``)."""
    assert choose(linear(128, 2048, 11264).kernel, SM_90, FMA).splits == 3


def test_a_grid_that_fills_the_sms_is_still_split_when_its_last_wave_is_short():
    """Qwen2.5-7B's gate and up projections at 128 rows: 4 slices, measured 1.29x faster."""
    choice = choose(linear(128, 3584, 37888).kernel, SM_90, FMA)
    assert choice is not None and choice.splits == 4
    assert choice.splits * 128 * 37888 * 4 <= MAX_PARTIAL_BYTES


def test_the_partial_sums_stay_within_their_memory_bound(monkeypatch):
    """Qwen2.5-7B's down projection at 128 rows takes 14 slices (25 MiB of partial sums);
    with a bound of 16 MiB it takes fewer."""
    kernel = linear(128, 18944, 3584).kernel
    assert choose(kernel, SM_90, FMA).splits == 14
    monkeypatch.setattr(split_k, "MAX_PARTIAL_BYTES", 16 * 1024 * 1024)
    split_k._choose.cache_clear()
    try:
        choice = choose(kernel, SM_90, FMA)
    finally:
        split_k._choose.cache_clear()
    assert choice is not None and choice.splits * 128 * 3584 * 4 <= 16 * 1024 * 1024


@pytest.mark.parametrize("m, k, n", [(2048, 2048, 2560), (2048, 5632, 2048), (2048, 3584, 37888)])
def test_large_grids_are_not_split(m, k, n):
    assert choose(linear(m, k, n).kernel, SM_90, FMA) is None


@pytest.mark.parametrize("k, n", [(3584, 4608), (3584, 3584), (18944, 3584)])
def test_qwens_projections_at_2048_rows_take_two_slices(k, n):
    """Two slices of 128 x 128 blocks measured 4 to 6 % faster than the whole K in 64 x 128
    blocks on the H200 (``2026-11-30_h200_split_k_sweep_m2048_qwen.json``)."""
    choice = choose(linear(2048, k, n).kernel, SM_90, FMA)
    assert choice is not None and choice.splits == 2


@pytest.mark.parametrize("k, n", [(96, 24), (2048, 2560)])
def test_decoding_gemvs_are_row_reductions_that_the_rule_leaves_alone(k, n):
    program = lamina.compile(linear_bias, inputs(1, k, n)).compilation
    assert [t.schedule for t in program.tiles] == ["row_reduction"]
    assert RULE.apply(program.loop, SM_90, FMA) is None


def test_a_pinned_split_is_taken_even_where_the_estimate_disagrees():
    choice = choose(linear(2048, 2048, 2560).kernel, SM_90, {"split_k": 4})
    assert choice.splits == 4 and choice.split_us > choice.unsplit_us


def test_the_slice_is_the_partial_kernels_outermost_parallel_loop():
    partial, _ = RULE.apply(unsplit_program(32, 512, 32), FOUR_SMS, {}).kernels
    assert loop_ir.format_kernel(partial).splitlines()[1] == f"  for s in parallel({partial_of(partial).splits}):"


@pytest.mark.parametrize("m, k, n", [(128, 2048, 2560), (128, 3584, 37888), (2048, 3584, 4608), (512, 768, 768)])
def test_the_floors_the_search_skips_by_are_below_every_estimate(m, k, n):
    """The search skips slice counts whose partial sums and combine cannot pay at their floors: the
    partial sums' every setting costs at least ``cost.floor_of_work_us``, and the combine at least a
    launch and a read of every partial sum at the memory's pace."""
    c = analyse(linear(m, k, n).kernel)
    for splits in usable_splits(k)[:6]:
        parts = split(c, splits, set(), SLICE_MULTIPLE)
        partial_bytes = splits * m * n * 4
        assert schedule.cheapest_estimate(parts.partial, SM_90, {}).total_us >= cost.floor_of_work_us(
            cost.products(c), partial_bytes, SM_90)
        assert split_k.COMBINE.estimate_cost(parts.combine, SM_90) >= SM_90.launch_us + partial_bytes / SM_90.memory_bytes_per_us

"""Float32 products on Hopper's wgmma (``products = wgmma``): the pins, the Tile IR, the kernels."""

import attrs
import pytest
import torch

import lamina
from lamina.bench.measure import float64_reference, relative_error
from lamina.core.errors import ScheduleError
from lamina.core.ir import expr as ex, kernel_ir, tile_ir
from lamina.plugins.schedules.contraction import ContractionSchedule, analyse, candidates
from lamina.plugins.schedules.contraction.wgmma.products import staged_row

from ..contraction_kernels import SM_90, batched_scores, linear, matmul, running_example, simulate_case
from ..nvrtc_in_background import start_compiling

SCHEDULE = ContractionSchedule()
ON_WGMMA = {"products": "wgmma"}
RAGGED = [linear(37, 68, 70, bias_relu=True), linear(130, 100, 72), batched_scores(2, 70, 36, 65)]
BLOCKS = {f"{m}x{n}": {"block_m": m, "block_n": n} for m in (64, 128) for n in (64, 128)}


@pytest.mark.parametrize("knobs", [*BLOCKS.values(), {"block_m": 128, "block_n": 64, "buffers": 2}],
                         ids=[*BLOCKS, "128x64, two buffers"])
@pytest.mark.parametrize("case", RAGGED, ids=[c.id for c in RAGGED])
def test_wgmma_kernels_match_pytorch_without_faults(case, knobs):
    tile = SCHEDULE.schedule(case.kernel, SM_90, {**ON_WGMMA, **knobs})
    assert tile.settings.products == "wgmma 3xtf32"
    kernel = SCHEDULE.lower(tile, SM_90)
    assert any(isinstance(s, kernel_ir.WgmmaTf32) and s.a_from == "registers"
               for s in kernel_ir.statements(kernel.body))
    compiling = start_compiling(kernel, "sm_90a")
    inputs = case.inputs()
    out, report = simulate_case(case, kernel, inputs)
    assert relative_error(out, float64_reference(case.reference, tuple(inputs.values()))) < 1e-6
    assert report.faults == []
    assert report.total_bank_conflicts == 0, report.bank_conflicts
    compiled = compiling.result()
    assert (compiled.spill_stores, compiled.spill_loads) == (0, 0)


def test_the_tile_ir_says_each_warpgroup_multiplies_its_rows_from_registers_and_its_columns_from_shared_memory():
    tile = SCHEDULE.schedule(linear(256, 256, 256).kernel, SM_90, {**ON_WGMMA, "block_m": 128, "block_n": 128})
    text = tile_ir.format_tile_kernel(tile)
    assert "  parallel i1 (256): block.x tile 128 = thread.x 4 x 32 per thread (grouped by 2, groups 8 apart)" in text
    assert "  parallel i0 (256): block.y tile 128 = thread.y 64 x 2 per thread (strided by 64)" in text
    assert "  reduce r0 (256): serial, step 32" in text
    assert "  grid (2, 2, 1) blocks of 256 threads, 131072 B shared" in text
    assert "  shared x[i0, r0] as f32[i0 128][r0 32, 128-byte swizzle], 3 buffers, copy cp.async 16 B" in text
    assert ("  products on tensor cores: wgmma m64n128k8 on tf32, each warpgroup 64 rows, each f32 operand as big + "
            "small tf32: the rows' read from swizzled shared memory into registers and split there, the columns' split "
            "in place in swizzled shared memory once a k-tile lands; 3 wgmma per product summed over each k-tile, then "
            "added in f32") in text


def test_a_k_tile_is_split_fenced_and_multiplied_in_three_wgmma_per_eight_k():
    tile = SCHEDULE.schedule(linear(128, 64, 64).kernel, SM_90, {**ON_WGMMA, "block_m": 128, "block_n": 64})
    lines = [line.strip() for line in kernel_ir.format_kernel(SCHEDULE.lower(tile, SM_90)).splitlines()]
    assert ("a_small[step][3] = x_tile[slot][warpgroup * 64 + tid % 128 // 32 * 16 + tid % 32 // 4 + 8]"
            "[tid % 4 + step * 8 + 4]") in lines
    assert "a_big[step][3] = tf32(max(min(a_small[step][3], 3.401992698887923e+38), -3.401992698887923e+38))" in lines
    assert "a_small[step][3] = a_small[step][3] - a_big[step][3]" in lines
    assert "vector load x4 raw_piece[0] <- w_tile[slot][round * 32 + tid // 8][tid % 8 * 4]" in lines
    assert "big_piece[3] = tf32(max(min(raw_piece[3], 3.401992698887923e+38), -3.401992698887923e+38))" in lines and "small_piece[3] = raw_piece[3] - big_piece[3]" in lines
    assert "vector store x4 w_tile[slot][round * 32 + tid // 8][tid % 8 * 4] <- big_piece[0]" in lines
    assert "vector store x4 w_small[kt % 2][round * 32 + tid // 8][tid % 8 * 4] <- small_piece[0]" in lines
    assert not any("x_small" in line for line in lines)
    wgmma = [line for line in lines if line.startswith("wgmma m64")]
    assert len(wgmma) == 12
    assert wgmma[0] == ("wgmma m64n64k8 tf32 (k_tile_sum[0][0]..k_tile_sum[1][15]) = "
                        "a_small[0][0..3] x w_tile[slot][0..63][0..7]^T")
    assert wgmma[1].endswith("+= a_big[0][0..3] x w_small[kt % 2][0..63][0..7]^T")
    assert wgmma[11].endswith("+= a_big[3][0..3] x w_tile[slot][0..63][24..31]^T")
    order = ["vector store x4 w_small[kt % 2][round * 32 + tid // 8][tid % 8 * 4] <- small_piece[0]",
             "wgmma wait (at most 0 pending)", "acc[0][0] = acc[0][0] + k_tile_sum[0][0]",
             "a_big[step][3] = tf32(max(min(a_small[step][3], 3.401992698887923e+38), -3.401992698887923e+38))", "fence shared memory for the async proxy", "barrier",
             "cp.async commit", "wgmma fence", wgmma[0], wgmma[11], "wgmma commit"]
    place = lines.index("for kt in 0..2:")
    for line in order:
        place = lines.index(line, place + 1)
    last = len(lines) - 1 - lines[::-1].index("wgmma wait (at most 0 pending)")
    assert lines[last - 1].startswith("fill_slot =") and lines[last + 1] == "acc[0][0] = acc[0][0] + k_tile_sum[0][0]"


@pytest.mark.parametrize("block_m", [64, 128])
def test_the_rows_are_staged_in_the_order_the_warpgroups_hold_their_accumulators(block_m):
    half = block_m // 2
    for warp in range(block_m // 16):
        for h in range(2):
            for g in range(8):
                value = staged_row(ex.const(16 * warp + 8 * h + g), block_m)
                assert int(value.value) == 8 * warp + g + half * h
    rows = [int(staged_row(ex.const(r), block_m).value) for r in range(block_m)]
    assert sorted(rows) == list(range(block_m))


def test_on_hopper_the_cost_model_runs_k_major_float32_products_on_wgmma():
    c = analyse(linear(2048, 3584, 4608).kernel)
    assert {(s.block_m, s.block_n) for s in candidates(c, SM_90) if s.products == "wgmma"} == {
        (m, n) for m in (64, 128) for n in (64, 128)}
    tile = SCHEDULE.schedule(c.kernel, SM_90, {})
    assert tile.settings.products == "wgmma 3xtf32"
    assert dict(tile.knobs)["chosen"].startswith("block 128x128x32, thread 2x32, in-block k-splits 1, buffers 3")
    assert SCHEDULE.schedule(c.kernel, attrs.evolve(SM_90, name="ampere", arch="sm_80"), {}).settings.products is None


def test_short_products_take_two_blocks_an_sm_and_long_ones_one_block_twice_as_wide():
    """The scores' q k^T (K = 128: four k-tiles) ran fastest in 128 x 64 blocks, two per SM, which hide each other's
    first copies and last stores; Qwen's qkv projection (K = 3584) in 128 x 128, one per SM."""
    scores = SCHEDULE.schedule(batched_scores(28, 2048, 128, 2048).kernel, SM_90, {})
    assert dict(scores.knobs)["chosen"].startswith("block 128x64x32, thread 2x16, in-block k-splits 1, buffers 3")
    assert "2 per SM at once" in dict(scores.knobs)["estimate"]
    projection = SCHEDULE.schedule(linear(2048, 3584, 4608).kernel, SM_90, {})
    assert "1 per SM at once" in dict(projection.knobs)["estimate"]


def test_pinning_a_knob_that_wgmma_fixes_keeps_to_fmas():
    c = analyse(linear(2048, 3584, 4608).kernel)
    assert {s.products for s in candidates(c, SM_90, {"thread_m": 8})} == {"fma"}
    assert {s.products for s in candidates(c, SM_90, {"products": "fma"})} == {"fma"}
    assert {s.products for s in candidates(c, SM_90, ON_WGMMA)} == {"wgmma"}


def test_products_wgmma_cannot_read_stay_on_fmas():
    assert SCHEDULE.schedule(matmul(256, 256, 256).kernel, SM_90, {}).settings.products is None


@pytest.mark.parametrize("case, knobs, reason", [
    (matmul(64, 64, 64), ON_WGMMA, "copies b\\[r0, i1\\] in 16-byte runs along r0: it must be contiguous along r0"),
    (linear(64, 66, 64), ON_WGMMA, "r0's extent and every other stride a multiple of 4"),
    (linear(64, 64, 64), {**ON_WGMMA, "block_m": 32}, "takes blocks of 64 or 128 rows by 64 or 128 columns"),
    (linear(64, 64, 64), {**ON_WGMMA, "block_k": 16}, "takes block_k = 32"),
    (linear(64, 64, 64), {**ON_WGMMA, "buffers": 1}, "buffers must be 2 or 3"),
    (running_example(), ON_WGMMA, "needs a float32 sum of products of one operand along the rows"),
])
def test_settings_wgmma_cannot_run_are_refused_with_the_reason(case, knobs, reason):
    with pytest.raises(ScheduleError, match=reason):
        SCHEDULE.schedule(case.kernel, SM_90, knobs)


def test_wgmma_needs_hopper():
    with pytest.raises(ScheduleError, match=r"needs Hopper's wgmma \(sm_90\); ampere is sm_80"):
        SCHEDULE.schedule(linear(64, 64, 64).kernel, attrs.evolve(SM_90, name="ampere", arch="sm_80"), ON_WGMMA)


def test_causal_scores_on_wgmma_skip_unneeded_blocks_and_match_pytorch_on_the_simulator():
    def scores_causal(q, k):
        s = q @ k.transpose(-1, -2) * 0.25
        mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1)
        return torch.softmax(s.masked_fill(mask, float("-inf")), -1)

    torch.manual_seed(0)
    inputs = (torch.randn(1, 2, 300, 24), torch.randn(1, 2, 300, 24))
    apart = ("lamina.builtin.schedules.matmul_row_reduction",)
    compiled = lamina.compile(scores_causal, inputs, knobs={"contraction": {**ON_WGMMA, "block_m": 64, "block_n": 64}},
                              disable=apart)
    (product,) = [t for t in compiled.compilation.tiles if t.schedule == "contraction"]
    assert product.settings.products == "wgmma 3xtf32" and "unneeded_product" in dict(product.knobs)
    assert relative_error(compiled(*inputs), float64_reference(scores_causal, inputs)) < 1e-5

"""Float32 products on the tensor cores (``products = mma_sync``): the pins, the Tile IR, the kernels."""

import attrs
import pytest
import torch

import lamina
from lamina.bench.measure import float64_reference, relative_error
from lamina.core.errors import ScheduleError, VerificationError
from lamina.core.ir import kernel_ir, tile_ir
from lamina.plugins.schedules.contraction import ContractionSchedule, analyse, candidates
from lamina.plugins.schedules.contraction.mma_sync.products import padding
from lamina.plugins.schedules.contraction.settings import ContractionSettings

from ..contraction_kernels import SM_90, batched, half_inputs, linear, matmul, matmul_a_transposed, running_example, simulate_case
from ..nvrtc_in_background import start_compiling

SCHEDULE = ContractionSchedule()
ON_TENSOR_CORES = {"products": "mma_sync"}
RAGGED = [matmul(33, 45, 40, name="ragged_33x45x40"), matmul(70, 200, 90, name="ragged_70x200x90"),
          linear(37, 70, 65, bias_relu=True), matmul_a_transposed(40, 33, 50), batched(3, 35, 20, 33)]
SETTINGS = {
    "32x32 of 2x2": {"block_m": 32, "block_n": 32, "thread_m": 2, "thread_n": 2},
    "32x32 of 4x4": {"block_m": 32, "block_n": 32, "thread_m": 4, "thread_n": 4},
    "64x32 of 8x8": {"block_m": 64, "block_n": 32, "thread_m": 8, "thread_n": 8},
    "32x64 of 4x4, k-tiles of 32": {"block_m": 32, "block_n": 64, "thread_m": 4, "thread_n": 4, "block_k": 32},
    "32x32 of 4x4, one buffer": {"block_m": 32, "block_n": 32, "thread_m": 4, "thread_n": 4, "buffers": 1},
}


@pytest.mark.parametrize("knobs", SETTINGS.values(), ids=list(SETTINGS))
@pytest.mark.parametrize("case", RAGGED, ids=[c.id for c in RAGGED])
def test_tensor_core_kernels_match_pytorch_without_faults_or_bank_conflicts(case, knobs):
    tile = SCHEDULE.schedule(case.kernel, SM_90, {**ON_TENSOR_CORES, **knobs})
    assert tile.settings.products == "3xtf32"
    kernel = SCHEDULE.lower(tile, SM_90)
    assert any(isinstance(s, kernel_ir.MmaTf32) for s in kernel_ir.statements(kernel.body))
    compiling = start_compiling(kernel, "sm_90")
    inputs = case.inputs()
    out, report = simulate_case(case, kernel, inputs)
    assert relative_error(out, float64_reference(case.reference, tuple(inputs.values()))) < 1e-6
    assert (report.races, report.out_of_bounds, report.unwritten_reads, report.misaligned) == ([], [], [], [])
    assert report.total_bank_conflicts == 0, report.bank_conflicts
    compiled = compiling.result()
    assert (compiled.spill_stores, compiled.spill_loads) == (0, 0)


def test_the_tile_ir_says_the_products_run_on_tensor_cores_in_warps_of_8x4_threads():
    tile = SCHEDULE.schedule(matmul(64, 64, 64).kernel, SM_90,
                             {**ON_TENSOR_CORES, "block_m": 64, "block_n": 64, "thread_m": 4, "thread_n": 4})
    text = tile_ir.format_tile_kernel(tile)
    assert "  parallel i1 (64): block.x tile 64 = thread.x 16 x 4 per thread (grouped by 2, groups 32 apart)" in text
    assert "  parallel i0 (64): block.y tile 64 = thread.y 16 x 4 per thread (strided by 16)" in text
    assert "  shared a[i0, r0] as f32[r0 16][i0 64 + pad 8], 2 buffers, copy cp.async 4 B" in text
    assert "  warps of 8 x 4 threads (y by x)" in text
    assert ("  products on tensor cores: mma m16n8k8 on tf32, each f32 operand as big + small tf32, "
            "3 mma per product") in text


def test_each_step_of_eight_splits_the_operands_and_sums_three_products_before_adding_them():
    kernel = SCHEDULE.lower(SCHEDULE.schedule(matmul(32, 32, 32).kernel, SM_90, {
        **ON_TENSOR_CORES, "block_m": 32, "block_n": 32, "thread_m": 2, "thread_n": 2}), SM_90)
    text = kernel_ir.format_kernel(kernel)
    assert "unrolled for kk in 0..16, step 8:" in text
    assert "a_big[0] = tf32(max(min(a_small[0], 3.401992698887923e+38), -3.401992698887923e+38))" in text and "a_small[0] = a_small[0] - a_big[0]" in text
    mma = [line.strip() for line in text.splitlines() if line.strip().startswith("mma")]
    assert [line.split("+= (")[1].split("[")[0] for line in mma[:3]] == ["a_small", "a_big", "a_big"]
    assert [line.split(") x (")[1].split("[")[0] for line in mma[:3]] == ["b_big", "b_small", "b_big"]
    assert all(line.startswith("mma m16n8k8 tf32 (step_sum[0], step_sum[1], step_sum[2], step_sum[3])")
               for line in mma)
    assert "acc[0][0] = acc[0][0] + step_sum[0]" in text


def test_the_cost_model_keeps_to_fma_unless_tensor_cores_are_pinned():
    c = analyse(matmul(256, 256, 256).kernel)
    assert {s.products for s in candidates(c, SM_90)} == {"fma"}
    assert {s.products for s in candidates(c, SM_90, ON_TENSOR_CORES)} == {"mma_sync"}
    assert SCHEDULE.schedule(matmul(256, 256, 256).kernel, SM_90, {}).settings.products is None


@pytest.mark.parametrize("row", [16, 32, 64, 128, 40])
def test_staged_rows_are_padded_to_eight_words_past_a_multiple_of_32(row):
    assert (row + padding(row)) % 32 in (8, 24) and padding(row) % 4 == 0


@pytest.mark.parametrize("knobs, reason", [
    ({"products": "tf32"}, "knob products = 'tf32' must be fma"),
    ({**ON_TENSOR_CORES, "in_block_k_splits": 2, "block_m": 32, "block_n": 32},
     "products = mma_sync takes whole k-tiles per warp; in_block_k_splits = 2 must be 1"),
    ({**ON_TENSOR_CORES, "block_m": 16, "block_n": 64}, "block tiles of at least 32 along each axis"),
    ({**ON_TENSOR_CORES, "block_m": 32, "block_n": 32, "thread_m": 1, "thread_n": 2}, "has an odd side"),
    ({**ON_TENSOR_CORES, "block_m": 32, "block_n": 32, "thread_m": 2, "thread_n": 2, "warp_columns": 8},
     "makes warps 4 threads wide, not warp_columns = 8"),
    ({**ON_TENSOR_CORES, "block_m": 32, "block_n": 32, "fragment_width": 4}, "fragment_width must be 1"),
    ({**ON_TENSOR_CORES, "block_m": 32, "block_n": 32, "copy_steps": 1}, "with products = mma_sync pin 0"),
])
def test_settings_the_tensor_cores_cannot_run_are_refused_with_the_reason(knobs, reason):
    with pytest.raises(ScheduleError, match=reason):
        SCHEDULE.schedule(matmul(64, 64, 64).kernel, SM_90, knobs)


@pytest.mark.parametrize("case", [running_example(), half_inputs(32, 32, 32)], ids=["prologue", "float16"])
def test_only_a_float32_product_of_two_operands_runs_on_tensor_cores(case):
    with pytest.raises(ScheduleError, match="needs a float32 sum of products of one operand along the rows"):
        SCHEDULE.schedule(case.kernel, SM_90, {**ON_TENSOR_CORES, "block_m": 32, "block_n": 32})


def test_the_tile_ir_verifier_checks_the_tensor_core_layout():
    tile = SCHEDULE.schedule(matmul(64, 64, 64).kernel, SM_90, {"block_m": 32, "block_n": 32, "thread_m": 2,
                                                               "thread_n": 2, "in_block_k_splits": 1})
    with pytest.raises(VerificationError, match="tensor-core products need warps of 8 x 4 threads"):
        tile_ir.verify_tile_kernel(tile_ir.TileKernel(tile.kernel, tile.schedule, tile.grid, tile.reduction,
                                                      tile.stages, settings=ContractionSettings(products="3xtf32")))


def test_the_tile_ir_verifier_refuses_copies_spread_among_tensor_core_steps():
    tile = SCHEDULE.schedule(matmul(64, 64, 64).kernel, SM_90, {**ON_TENSOR_CORES, "block_m": 32, "block_n": 32})
    tile_ir.verify_tile_kernel(tile)
    with pytest.raises(VerificationError, match="issue each k-tile's copies at once, not over 1 steps"):
        tile_ir.verify_tile_kernel(attrs.evolve(tile, settings=attrs.evolve(tile.settings, copy_steps=1)))


def test_the_target_reads_its_architecture_as_a_number():
    assert SM_90.compute_capability == 90
    assert attrs.evolve(SM_90, name="old", arch="sm_75").compute_capability == 75
    with pytest.raises(ScheduleError, match=r"needs tf32 tensor cores \(sm_80 or later\); old is sm_75"):
        SCHEDULE.schedule(matmul(64, 64, 64).kernel, attrs.evolve(SM_90, name="old", arch="sm_75"),
                          {**ON_TENSOR_CORES, "block_m": 32, "block_n": 32})


def test_pinned_tensor_cores_keep_a_product_and_its_row_softmax_apart():
    def scores(q, k):
        return torch.softmax(q @ k.transpose(-1, -2) * 0.125, -1)

    q, k = torch.randn(1, 4, 128, 64), torch.randn(1, 4, 128, 64)
    # matmul_row_reduction refuses the tensor cores, so the product is left to the contraction.
    pinned = {"contraction": ON_TENSOR_CORES, "matmul_row_reduction": ON_TENSOR_CORES}
    tiles = lamina.Compiler(knobs=pinned, target="sm_90").compile(scores, (q, k)).compilation.tiles
    assert [(t.schedule, t.settings.products if t.settings else None) for t in tiles] == [("contraction", "3xtf32"), ("row_reduction", None)]

"""The Hopper GEMM's reduction in slices summed by the blocks of one cluster (``cluster_slices``): each
block sums its slice's k-tiles, the others leave their sums in shared memory, and the cluster's first
block adds them through distributed shared memory and runs the epilogue.

On the simulator the kernels run on small ragged shapes (rows, columns and the reduction no multiple
of any tile, the last slice the shortest), every cluster load checked as every other access."""

import attrs
import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.bench.measure import float64_reference, relative_error
from lamina.core.errors import ScheduleError, SimulationError
from lamina.core.ir import dtypes, expr as ex, kernel_ir, tile_ir
from lamina.plugins.schedules.contraction import ContractionSchedule

from ..contraction_kernels import SM_90, rewritten, simulate_case
from .test_wgmma_tma import assert_runs_without_faults_and_compiles_without_spills, linear16, pins

SCHEDULE = ContractionSchedule()


def sliced(block_m: int, block_n: int, stages: int, groups: int, slices: int, **more) -> dict:
    return {**pins(block_m, block_n, stages, groups), "cluster_slices": slices, "split_k": 1, **more}


SIMULATED = {
    "bf16_64x64_2_slices_the_ring_wraps": (linear16(70, 328, 72), sliced(64, 64, 2, 1, 2)),
    "bf16_64x64_3_slices_the_last_shorter_and_ragged": (linear16(70, 312, 136), sliced(64, 64, 2, 1, 3)),
    "fp16_64x96_4_slices_down_groups_of_2_rows": (linear16(150, 600, 100, dtypes.float16),
                                                 sliced(64, 96, 3, 1, 4, grouped_rows=2)),
    "bf16_128x128_two_warpgroups_outputs_stored_by_the_tma": (linear16(250, 200, 136), sliced(128, 128, 2, 2, 2)),
    "bf16_odd_rows_through_shared_memory": (linear16(70, 200, 77), sliced(64, 64, 2, 1, 2)),
}


def _lowered(name: str) -> tuple:
    case, knobs = SIMULATED[name]
    tile = SCHEDULE.schedule(case.kernel, SM_90, knobs)
    assert tile.reduction.cluster_blocks == knobs["cluster_slices"]
    return case, SCHEDULE.lower(tile, SM_90)


@pytest.mark.parametrize("name", SIMULATED)
def test_slices_summed_in_a_cluster_match_eager_and_float64_on_ragged_shapes_without_faults(name):
    case, kernel = _lowered(name)
    assert kernel.launch.cluster == (SIMULATED[name][1]["cluster_slices"], 1, 1)
    assert_runs_without_faults_and_compiles_without_spills(case, kernel)


def test_each_block_copies_its_slice_and_the_first_adds_the_others_sums():
    _, kernel = _lowered("bf16_64x64_3_slices_the_last_shorter_and_ragged")
    assert kernel.launch.grid == (3 * 3, 2, 1)  # three slices of each of three block columns, two block rows
    text = kernel_ir.format_kernel(kernel)
    # 312 is five k-tiles of 64: slices of two, two and one
    assert "var slice_k_tiles: i64 = min(-(blockIdx.x % 3 * 2) + 5, 2)" in text
    assert "tma load w_tile[stage][0][0] <- w_map at (block_col * 64, blockIdx.x % 3 * 128 + kt * 64)" in text
    loads = [n for s in kernel_ir.statements(kernel.body) for e in kernel_ir.expressions(s) for n in ex.walk(e)
             if isinstance(n, kernel_ir.ClusterLoad)]
    assert sorted({int(n.rank.value) for n in loads}) == [1, 2]
    assert sum(isinstance(s, kernel_ir.ClusterBarrier) for s in kernel_ir.statements(kernel.body)) == 2


def test_the_tile_ir_says_how_the_reduction_is_sliced():
    case, knobs = SIMULATED["bf16_128x128_two_warpgroups_outputs_stored_by_the_tma"]
    text = tile_ir.format_tile_kernel(SCHEDULE.schedule(case.kernel, SM_90, knobs))
    assert "reduce r0 (200): serial, step 64, across a cluster of 2 blocks along x" in text
    assert ("the reduction in 2 slices of 2 k-tiles, one per block of a cluster of 2: the blocks other than the "
            "first put their float32 sums in shared memory, and the first adds them to its own through distributed "
            "shared memory and runs the epilogue") in text
    assert "the reduction in 2 slices summed in a cluster" in text  # the chosen setting's summary


def test_without_the_second_meeting_a_block_may_end_before_the_first_reads_its_sums():
    """A planted fault: the cluster's last meeting left out, so that a block other than the first may
    finish while the first still reads its shared memory."""
    case, kernel = _lowered("bf16_64x64_2_slices_the_ring_wraps")
    meetings = [s for s in kernel.body if isinstance(s, kernel_ir.ClusterBarrier)]
    planted = attrs.evolve(kernel, body=[s for s in kernel.body if s is not meetings[-1]])
    torch.manual_seed(0)
    with pytest.raises(SimulationError, match="slice_sums of block .* is read by another block of its cluster after "
                                              "the last cluster barrier"):
        simulate_case(case, planted, case.inputs())


def test_without_the_first_meeting_the_first_block_reads_sums_not_yet_left():
    case, kernel = _lowered("bf16_64x64_2_slices_the_ring_wraps")
    first = next(s for s in kernel.body if isinstance(s, kernel_ir.ClusterBarrier))
    planted = attrs.evolve(kernel, body=rewritten(kernel.body, lambda s: [] if s is first else [s]))
    torch.manual_seed(0)
    with pytest.raises(SimulationError, match="cluster load of slice_sums.* it was stored with no cluster barrier"):
        simulate_case(case, planted, case.inputs())


@pytest.mark.parametrize("reduction, knobs, reason", [
    (200, sliced(64, 64, 2, 1, 2, tile_scheduler="persistent"), "cluster_slices = 2 runs a block per slice of each tile"),
    (200, sliced(64, 64, 2, 1, 2, cluster_blocks=2), "cluster_slices = 2 and cluster_blocks = 2 both make clusters"),
    (152, sliced(64, 64, 2, 1, 4), "the reduction of 152 is 3 k-tiles of 64, too few for 4 slices"),
])
def test_pins_that_cannot_slice_the_reduction_are_refused_with_the_reason(reduction, knobs, reason):
    with pytest.raises(ScheduleError, match=reason):
        SCHEDULE.schedule(linear16(128, reduction, 128).kernel, SM_90, knobs)


def test_an_illegal_slice_count_is_refused():
    with pytest.raises(ScheduleError, match="knob cluster_slices = 5 must be one of 1, 2, 3, 4"):
        SCHEDULE.schedule(linear16(256, 256, 256).kernel, SM_90, {"cluster_slices": 5})


def test_the_cost_model_leaves_the_slices_to_a_pin():
    tile = SCHEDULE.schedule(linear16(128, 2048, 2048).kernel, SM_90, {"products": "wgmma_tma"})
    assert tile.reduction.cluster_blocks == 1


def _linear_residual_bias(x, w, bias, residual):
    return F.linear(x, w, bias) + residual


def test_a_linear_with_bias_and_residual_through_torch_compile_sums_its_slices_in_clusters():
    torch.manual_seed(0)
    x, w = torch.randn(100, 600, dtype=torch.bfloat16), torch.randn(136, 600, dtype=torch.bfloat16) / 600 ** 0.5
    bias, residual = torch.randn(136, dtype=torch.bfloat16), torch.randn(100, 136, dtype=torch.bfloat16)
    args = (x, w, bias, residual)
    compiled = lamina.compile(_linear_residual_bias, args, target="sm_90",
                              knobs={"contraction": sliced(64, 64, 3, 1, 3)})
    (tile,) = compiled.compilation.tiles
    assert tile.reduction.cluster_blocks == 3
    exact = float64_reference(_linear_residual_bias, args)
    assert relative_error(compiled(*args), exact) <= 1.25 * relative_error(_linear_residual_bias(*args), exact) + 1e-3


GPU_CASES = [((128, 3584, 4608), sliced(128, 128, 4, 2, 4)), ((128, 2048, 2560), sliced(64, 128, 4, 1, 3)),
             ((512, 2048, 2048), sliced(128, 128, 4, 2, 2)), ((333, 1032, 700), sliced(64, 64, 4, 1, 2))]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape, knobs", GPU_CASES, ids=[f"{m}x{k}x{n}_{knobs['cluster_slices']}_slices"
                                                         for (m, k, n), knobs in GPU_CASES])
def test_slices_summed_in_a_cluster_match_eager_on_the_gpu(shape, knobs, dtype):
    m, k, n = shape
    torch.manual_seed(0)
    x, w = torch.randn(m, k, dtype=dtype, device="cuda"), torch.randn(n, k, dtype=dtype, device="cuda") / k ** 0.5
    bias, residual = torch.randn(n, dtype=dtype, device="cuda"), torch.randn(m, n, dtype=dtype, device="cuda")
    args = (x, w, bias, residual)
    compiled = lamina.compile(_linear_residual_bias, args, knobs={"contraction": knobs})
    (kernel,) = compiled.compilation.kernels.kernels
    assert kernel.launch.cluster == (knobs["cluster_slices"], 1, 1)
    exact = float64_reference(_linear_residual_bias, args)
    assert relative_error(compiled(*args), exact) <= 1.25 * relative_error(_linear_residual_bias(*args), exact) + 1e-3

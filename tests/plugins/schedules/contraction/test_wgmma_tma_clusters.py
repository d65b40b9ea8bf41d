"""Pairs of Hopper GEMM blocks sharing B (``cluster_blocks = 2``): two blocks of adjacent block rows
run as a cluster, each block's producer copies half of B's k-tile and the TMA multicasts it to both,
and a stage is refilled only once the consumers of both blocks have released it.

On the simulator the kernels run on small ragged shapes (rows, columns and the reduction no
multiple of any tile), the remote arrivals and multicast copies checked as every other access."""

import attrs
import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.bench.measure import float64_reference, relative_error
from lamina.core.errors import ScheduleError, SimulationError
from lamina.core.ir import dtypes, kernel_ir, sizes, tile_ir
from lamina.plugins.schedules.contraction import ContractionSchedule

from ..contraction_kernels import SM_90, rewritten, simulate_case
from .test_wgmma_tma import assert_runs_without_faults_and_compiles_without_spills, linear16, matmul16, pins

SCHEDULE = ContractionSchedule()
TMA = "wgmma 16-bit tma"


def paired(block_m: int, block_n: int, stages: int, groups: int, **more) -> dict:
    return {**pins(block_m, block_n, stages, groups), "cluster_blocks": 2, **more}


SIMULATED = {
    "bf16_64x64_2_stages_two_pairs_the_ring_wraps": (linear16(200, 328, 150), paired(64, 64, 2, 1)),
    "fp16_64x96_pairs_down_groups_of_4_rows": (linear16(250, 136, 100, dtypes.float16),
                                               paired(64, 96, 3, 1, grouped_rows=4)),
    "bf16_128x128_two_warpgroups": (linear16(250, 136, 200), paired(128, 128, 4, 2)),
    "bf16_64x80_a_half_of_40_rows": (linear16(200, 72, 150), paired(64, 80, 2, 1)),
    "bf16_odd_rows_through_shared_memory": (linear16(200, 136, 77), paired(64, 64, 2, 1)),
}


def _lowered(name: str) -> tuple:
    case, knobs = SIMULATED[name]
    tile = SCHEDULE.schedule(case.kernel, SM_90, knobs)
    assert tile.settings.products == TMA and tile.settings.cluster_blocks == 2
    return case, SCHEDULE.lower(tile, SM_90)


@pytest.mark.parametrize("name", SIMULATED)
def test_pairs_sharing_b_match_eager_and_float64_on_ragged_shapes_without_faults(name):
    case, kernel = _lowered(name)
    assert kernel.launch.cluster == (2, 1, 1)
    assert_runs_without_faults_and_compiles_without_spills(case, kernel)


ONE_SM = attrs.evolve(SM_90, sm_count=1)

PERSISTENT = {
    "bf16_64x64_one_cluster_walks_every_pair": (linear16(200, 200, 150), paired(64, 64, 2, 1)),
    "bf16_64x96_pairs_down_groups_of_4_rows": (linear16(250, 136, 100), paired(64, 96, 3, 1, grouped_rows=4)),
    "bf16_128x128_two_warpgroups": (linear16(250, 136, 200), paired(128, 128, 4, 2)),
}


@pytest.mark.parametrize("name", PERSISTENT)
def test_persistent_clusters_walk_pairs_of_tiles_and_match_eager_without_faults(name):
    """One cluster of two blocks (a target of one SM) walks every pair of tiles, the ring's stages
    counted across the pairs."""
    case, knobs = PERSISTENT[name]
    tile = SCHEDULE.schedule(case.kernel, ONE_SM, {**knobs, "tile_scheduler": "persistent"})
    assert "persistent: 1 cluster of 2 blocks walks the" in tile_ir.format_tile_kernel(tile)
    kernel = SCHEDULE.lower(tile, ONE_SM)
    assert kernel.launch.grid == (2, 1, 1) and kernel.launch.cluster == (2, 1, 1)
    assert_runs_without_faults_and_compiles_without_spills(case, kernel)


def test_each_block_copies_half_of_b_for_both_and_tells_the_other_when_it_is_done():
    _, kernel = _lowered("bf16_64x64_2_stages_two_pairs_the_ring_wraps")
    loads = [s for s in kernel_ir.statements(kernel.body) if isinstance(s, kernel_ir.TmaLoad)]
    assert [s.multicast for s in loads] == [(), (0, 1)]
    b_map = kernel.tensor_map(loads[1].tensor_map)
    assert b_map.box == (32, 64)
    remote = [s for s in kernel_ir.statements(kernel.body) if isinstance(s, kernel_ir.MbarrierArrive) and s.rank is not None]
    assert len(remote) == 1
    inits = {s.barrier: s.arrivals for s in kernel_ir.statements(kernel.body) if isinstance(s, kernel_ir.MbarrierInit)}
    assert inits[remote[0].barrier] == 128 + 4  # the block's consumer threads, and one thread of each of the other's warps
    assert sum(isinstance(s, kernel_ir.ClusterBarrier) for s in kernel_ir.statements(kernel.body)) == 2
    text = kernel_ir.format_kernel(kernel)
    assert ("tma load w_tile[stage][blockIdx.x % 2 * 32][0] <- w_map at (block_col * 64 + blockIdx.x % 2 * 32, "
            "kt * 64), completing on full[stage], multicast to the cluster's blocks 0, 1") in text
    assert "mbarrier arrive empty[(kt + 1) % 2] of the cluster's block (blockIdx.x % 2 + 1) % 2" in text
    assert "cluster (2, 1, 1)" in text.splitlines()[0]


def test_the_tile_ir_says_which_blocks_share_what():
    case, knobs = SIMULATED["bf16_128x128_two_warpgroups"]
    tile = SCHEDULE.schedule(case.kernel, SM_90, knobs)
    text = tile_ir.format_tile_kernel(tile)
    assert ("clusters of 2 blocks of adjacent block rows sharing B: each block's producer copies half of B's k-tile "
            "(64 of its 128 rows) and the TMA multicasts it to both blocks") in text
    assert "clusters of 2 sharing B" in dict(tile.knobs)["chosen"]


def test_without_the_other_block_s_release_its_stage_is_overwritten_under_its_wgmma():
    """A planted fault: each block's stages refilled once its own consumers are done, the other
    block's still reading the half that this block's producer multicasts to it."""
    case, kernel = _lowered("bf16_64x64_2_stages_two_pairs_the_ring_wraps")

    def own_release_only(s):
        if isinstance(s, kernel_ir.MbarrierArrive) and s.rank is not None:
            return []
        if isinstance(s, kernel_ir.MbarrierInit) and s.arrivals == 132:
            return [attrs.evolve(s, arrivals=128)]
        return [s]

    planted = attrs.evolve(kernel, body=rewritten(kernel.body, own_release_only))
    torch.manual_seed(0)
    with pytest.raises(SimulationError, match="written by a TMA copy multicast from block .* must release the stage"):
        simulate_case(case, planted, case.inputs())


@pytest.mark.parametrize("case, knobs, reason", [
    (linear16(300, 256, 256), paired(128, 64, 2, 2), "300 rows in blocks of 128 must make an even number of block rows"),
    (matmul16(256, 256, 256), paired(64, 64, 2, 1), "shares B's k-tiles as K-major boxes; this B lies along n"),
])
def test_pins_that_cannot_pair_blocks_are_refused_with_the_reason(case, knobs, reason):
    with pytest.raises(ScheduleError, match=reason):
        SCHEDULE.schedule(case.kernel, SM_90, knobs)


def test_rows_counted_at_run_time_cannot_pair_even_where_their_hint_would():
    rows = sizes.symbol(0)
    case = linear16(rows, 256, 256)
    with sizes.hinted({rows.name: 256}), pytest.raises(ScheduleError, match="s0 rows in blocks of 64 must make an "
                                                                             "even number of block rows"):
        SCHEDULE.schedule(case.kernel, SM_90, paired(64, 64, 2, 1))


def test_an_illegal_cluster_size_is_refused():
    with pytest.raises(ScheduleError, match="knob cluster_blocks = 4 must be 1 .* or 2"):
        SCHEDULE.schedule(linear16(256, 256, 256).kernel, SM_90, {"cluster_blocks": 4})


def test_split_k_slices_pair_up_as_whole_products_do():
    torch.manual_seed(0)
    x, w = torch.randn(200, 448, dtype=torch.bfloat16), torch.randn(72, 448, dtype=torch.bfloat16)
    knobs = {"contraction": {**paired(64, 64, 2, 1), "split_k": 2}}
    compiled = lamina.compile(lambda x, w: x @ w.T, (x, w), knobs=knobs)
    partial = compiled.compilation.tiles[0]
    assert partial.settings.cluster_blocks == 2 and dict(partial.knobs)["split_k"].startswith("2 (partial sums")
    exact = float64_reference(lambda x, w: x @ w.T, (x, w))
    assert relative_error(compiled(x, w), exact) < 1.5 * relative_error(x @ w.T, exact) + 1e-4


def _gated_mlp(x, gate, up, bias):
    return F.silu(F.linear(x, gate)) * F.linear(x, up) + bias


def _gated_inputs(rows: int, features: int, hidden: int, device: str = "cpu"):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, features, generator=generator)
    gate, up = (torch.randn(hidden, features, generator=generator) * features ** -0.5 for _ in range(2))
    bias = torch.randn(hidden, generator=generator)
    return tuple(t.to(torch.bfloat16).to(device) for t in (x, gate, up, bias))


def test_a_gated_mlp_pairs_blocks_each_copying_one_weight_and_matches_eager_on_the_simulator():
    args = _gated_inputs(200, 72, 88)
    compiled = lamina.compile(_gated_mlp, args, target="sm_90", knobs={"contraction": paired(64, 64, 2, 1)})
    (tile,) = [t for t in compiled.compilation.tiles if t.schedule == "contraction"]
    assert tile.settings.paired and tile.settings.cluster_blocks == 2
    (kernel,) = compiled.compilation.kernels.kernels
    loads = [s for s in kernel_ir.statements(kernel.body) if isinstance(s, kernel_ir.TmaLoad)]
    assert sorted(s.multicast for s in loads) == [(), (0, 1), (0, 1)]
    out = compiled(*args)
    reference = float64_reference(_gated_mlp, args)
    assert relative_error(out, reference) <= 1.25 * relative_error(_gated_mlp(*args), reference) + 1e-3


GPU_CASES = [((512, 3584, 4096), paired(128, 256, 4, 2)), ((2048, 2048, 2000), paired(128, 128, 4, 2)),
             ((333, 1032, 700), paired(64, 128, 4, 1)), ((512, 2048, 32000), paired(128, 256, 4, 2)),
             ((512, 2048, 32000), paired(128, 256, 4, 2, tile_scheduler="persistent")),
             ((2048, 2048, 2000), paired(128, 128, 4, 2, tile_scheduler="persistent", grouped_rows=8))]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape, knobs", GPU_CASES, ids=[f"{m}x{k}x{n}_{knobs.get('tile_scheduler', 'grid')}"
                                                         for (m, k, n), knobs in GPU_CASES])
def test_pairs_sharing_b_match_eager_on_the_gpu(shape, knobs, dtype):
    m, k, n = shape
    torch.manual_seed(0)
    x, w = torch.randn(m, k, dtype=dtype, device="cuda"), torch.randn(n, k, dtype=dtype, device="cuda") / k ** 0.5
    residual = torch.randn(m, n, dtype=dtype, device="cuda")

    def program(x, w, residual):
        return F.linear(x, w) + residual

    compiled = lamina.compile(program, (x, w, residual), knobs={"contraction": knobs})
    product = compiled.compilation.kernels.kernels[0]  # a split product's partial sums come first
    assert product.launch.cluster == (2, 1, 1)
    out = compiled(x, w, residual)
    reference = float64_reference(program, (x, w, residual))
    assert relative_error(out, reference) < 1.5 * relative_error(program(x, w, residual), reference) + 1e-4


@pytest.mark.gpu
def test_a_gated_mlp_in_pairs_matches_eager_on_the_gpu():
    args = _gated_inputs(512, 2048, 5632, "cuda")
    compiled = lamina.compile(_gated_mlp, args, knobs={"contraction": paired(128, 96, 4, 2)})
    out = compiled(*args)
    reference = float64_reference(_gated_mlp, args)
    assert relative_error(out, reference) <= 1.25 * relative_error(_gated_mlp(*args), reference) + 1e-3

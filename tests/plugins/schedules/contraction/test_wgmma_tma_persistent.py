"""Persistent blocks for the Hopper GEMM (``tile_scheduler = persistent``): as many blocks as the SMs
hold, each walking its share of the output tiles, the ring of stages counted across them.

On the simulator the target has one or two SMs, so that a block walks several tiles and the ring
wraps from one tile into the next; ragged shapes leave a last step with no tile for some blocks."""

import attrs
import pytest
import torch

import lamina
from lamina.bench.measure import float64_reference, relative_error
from lamina.core.errors import ScheduleError, SimulationError
from lamina.core.ir import dtypes, expr as ex, kernel_ir, tile_ir
from lamina.plugins.schedules.contraction import ContractionSchedule

from ..contraction_kernels import F32, SM_90, Case, contraction, load, simulate_case
from ..nvrtc_in_background import start_compiling
from .test_wgmma_tma import assert_matches_eager_and_float64, linear16, pins

SCHEDULE = ContractionSchedule()
ONE_SM, TWO_SMS = attrs.evolve(SM_90, sm_count=1), attrs.evolve(SM_90, sm_count=2)


def persistent(block_m: int, block_n: int, stages: int, groups: int, **more) -> dict:
    return {**pins(block_m, block_n, stages, groups), "tile_scheduler": "persistent", **more}


def batched16(batch: int, m: int, k: int, n: int) -> Case:
    """``a @ b.T`` per batch of bf16 ``a`` (batch, m, k) and ``b`` (batch, n, k)."""
    bf16 = dtypes.bfloat16
    value = ex.op("mul", ex.cast(load("a", "i0", "i1", "r0", dtype=bf16), F32),
                  ex.cast(load("b", "i0", "i2", "r0", dtype=bf16), F32))
    kernel = contraction("bmm", {"a": (batch, m, k), "b": (batch, n, k)}, [("i0", batch), ("i1", m), ("i2", n)],
                         ("r0", k), value, ("out", (batch, m, n)), input_dtype=bf16)
    return Case("bmm", kernel, lambda a, b: a.float() @ b.float().transpose(-1, -2))


SIMULATED = {
    "bf16_64x64_2_stages_3_blocks_walk_12_tiles": (linear16(200, 200, 150), persistent(64, 64, 2, 1), ONE_SM),
    "fp16_64x128_3_stages_a_last_step_without_tile": (linear16(70, 328, 300, dtypes.float16),
                                                      persistent(64, 128, 3, 1), ONE_SM),
    "bf16_128x128_two_warpgroups": (linear16(300, 136, 200), persistent(128, 128, 4, 2), ONE_SM),
    "bf16_blocks_down_groups_of_3_rows": (linear16(200, 72, 150), persistent(64, 64, 2, 1, grouped_rows=3), TWO_SMS),
}


def _run(case: Case, kernel: kernel_ir.Kernel):
    torch.manual_seed(0)
    inputs = case.inputs()
    out, report = simulate_case(case, kernel, inputs)
    return inputs, out, report


@pytest.mark.parametrize("name", SIMULATED)
def test_persistent_blocks_match_eager_and_float64_on_ragged_shapes_without_faults(name):
    case, knobs, target = SIMULATED[name]
    tile = SCHEDULE.schedule(case.kernel, target, knobs)
    tiles = tile.grid_shape()
    kernel = SCHEDULE.lower(tile, target)
    blocks = kernel.launch.grid[0]
    assert kernel.launch.grid == (blocks, 1, 1) and blocks < tiles["x"] * tiles["y"]
    compiling = start_compiling(kernel, "sm_90a")
    inputs, out, report = _run(case, kernel)
    assert report.faults == []
    assert_matches_eager_and_float64(case, out, inputs)
    compiled = compiling.result()
    assert (compiled.spill_stores, compiled.spill_loads) == (0, 0)


def test_a_batched_product_walks_the_batch_too():
    case = batched16(3, 70, 136, 72)
    tile = SCHEDULE.schedule(case.kernel, ONE_SM, persistent(64, 64, 2, 1))
    kernel = SCHEDULE.lower(tile, ONE_SM)
    assert kernel.launch.grid[1:] == (1, 1)
    inputs, out, report = _run(case, kernel)
    assert report.faults == []
    torch.testing.assert_close(out, case.reference(*inputs.values()), rtol=1e-4, atol=1e-3)


def test_equal_split_k_slices_are_walked_as_a_batch():
    """Two slices of K = 512, 256 deep each: the slice is one more coordinate of the tiles."""
    torch.manual_seed(1)
    x, w = torch.randn(70, 512, dtype=torch.bfloat16), torch.randn(136, 512, dtype=torch.bfloat16)
    compiled = lamina.compile(lambda x, w: x @ w.T, (x, w), target="sm_90",
                              knobs={"contraction": {**persistent(64, 64, 2, 1), "split_k": 2}})
    walking = [t for t in compiled.compilation.tiles if t.schedule == "contraction"]
    assert [t.settings.tile_scheduler for t in walking] == ["persistent"]
    assert dict(walking[0].knobs)["split_k"].startswith("2 ")
    torch.testing.assert_close(compiled(x, w), x @ w.T, rtol=1.6e-2, atol=1e-2)


def test_the_tile_ir_says_how_many_blocks_walk_the_tiles():
    tile = SCHEDULE.schedule(linear16(2048, 2048, 2560).kernel, SM_90, persistent(128, 256, 4, 2))
    text = tile_ir.format_tile_kernel(tile)
    assert "persistent blocks" in dict(tile.knobs)["chosen"]
    assert ("persistent: 132 blocks walk the 160 tiles, block b taking tiles b, b + 132, ...; the producer "
            "copies a tile's first k-tiles while the consumers store the tile before") in text
    assert SCHEDULE.lower(tile, SM_90).launch.grid == (132, 1, 1)


def test_the_consumers_release_the_last_stage_of_each_tile():
    """Without that release the producer waits for a stage that no one empties: a deadlock."""
    case, knobs, target = SIMULATED["bf16_64x64_2_stages_3_blocks_walk_12_tiles"]
    kernel = SCHEDULE.lower(SCHEDULE.schedule(case.kernel, target, knobs), target)

    def drop_after_wait(body):
        """The arrive right after ``wgmma wait (0)``, not the ones inside the k-tile loop."""
        out, skip = [], False
        for s in body:
            if isinstance(s, kernel_ir.For):
                s = attrs.evolve(s, body=drop_after_wait(s.body))
            elif isinstance(s, kernel_ir.If):
                s = attrs.evolve(s, then=drop_after_wait(s.then), orelse=drop_after_wait(s.orelse))
            if skip and isinstance(s, kernel_ir.MbarrierArrive):
                skip = False
                continue
            skip = s == kernel_ir.WgmmaWait(0)
            out.append(s)
        return tuple(out)

    planted = attrs.evolve(kernel, body=drop_after_wait(kernel.body))
    assert planted != kernel
    with pytest.raises(SimulationError, match="deadlock"):
        _run(case, planted)


@pytest.mark.parametrize("knobs, message", [
    ({**pins(64, 64, 2, 1), "tile_scheduler": "sideways"}, "tile_scheduler = 'sideways' must be grid"),
    ({**persistent(64, 64, 2, 1), "split_k": 3}, "split_k = 3 leaves the partial sums no setting"),
])
def test_what_cannot_run_is_refused_with_the_reason(knobs, message):
    """Three slices of K = 448 are 192, 192 and 64 deep, the last slice's tiles ending sooner, or 160,
    160 and 128, not whole k-tiles: persistent blocks can walk neither."""
    x, w = torch.randn(128, 448, dtype=torch.bfloat16), torch.randn(256, 448, dtype=torch.bfloat16)
    with pytest.raises(ScheduleError, match=message):
        lamina.compile(lambda x, w: x @ w.T, (x, w), target="sm_90", knobs={"contraction": knobs})


def test_a_pinned_tile_scheduler_reaches_the_split_k_decision():
    """A skinny product the cost model splits along K: with persistent blocks pinned alone, the
    split-K rule weighs only slices that persistent blocks can walk (equal ones), instead of
    choosing slices that the schedule then refuses."""
    x, w = torch.randn(128, 5632, dtype=torch.bfloat16), torch.randn(2048, 5632, dtype=torch.bfloat16)
    compiled = lamina.compile(lambda x, w: x @ w.T, (x, w), target="sm_90",
                              knobs={"contraction": {"tile_scheduler": "persistent"}})
    products = [t for t in compiled.compilation.tiles if t.schedule == "contraction"]
    assert len(products) == 1 and products[0].kernel.name.endswith("_partials")
    assert products[0].settings.tile_scheduler == "persistent"


def test_the_cost_model_keeps_the_grid_unless_persistent_blocks_are_pinned():
    tile = SCHEDULE.schedule(linear16(2048, 2048, 2560).kernel, SM_90, {})
    assert tile.settings.tile_scheduler == "grid"
    assert "persistent" not in tile_ir.format_tile_kernel(tile)


@pytest.mark.gpu
@pytest.mark.parametrize("m, k, n", [(2048, 2048, 2560), (333, 1032, 700), (4096, 3072, 8192)])
def test_persistent_blocks_match_eager_on_the_gpu(m, k, n):
    torch.manual_seed(0)
    x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda") / k ** 0.5
    compiled = lamina.compile(lambda x, w: x @ w.T, (x, w), knobs={"contraction": {"tile_scheduler": "persistent"}})
    assert [t.settings.tile_scheduler for t in compiled.compilation.tiles] == ["persistent"]
    out = compiled(x, w)
    reference = float64_reference(lambda x, w: x @ w.T, (x, w))
    assert relative_error(out, reference) < 1.5 * relative_error(x @ w.T, reference) + 1e-4

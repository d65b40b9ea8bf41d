"""bf16 and fp16 products as a pipelined Hopper GEMM (``products = wgmma_tma``): the cost model's
choice, the Tile IR, the pins, the kernels on the simulator and through NVRTC.

The simulator is slow on big shapes, so the kernels run on small ragged ones with the knobs
pinned to the settings that the cost model picks at the suite's sizes (``AT_SIZE`` says which,
and ``test_the_cost_model_picks_wgmma_tma_for_16_bit_linears`` checks it still does)."""

import attrs
import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.backends.cuda.targets import SM80 as SM_80
from lamina.bench.measure import float64_reference, relative_error
from lamina.core.errors import ScheduleError, SimulationError
from lamina.core.ir import dtypes, expr as ex, kernel_ir, tile_ir
from lamina.plugins.schedules.contraction import ContractionSchedule

from ..contraction_kernels import (F32, SM_90, THREE_KERNELS, Case, contraction, linear, load, rewritten,
                                   simulate_case)
from ..nvrtc_in_background import start_compiling


SCHEDULE = ContractionSchedule()

TMA = "wgmma 16-bit tma"
SERIALISED_WGMMA = "C7514"
"""ptxas's warning that it serialised a kernel's wgmma (an accumulator read between a wgmma and its wait)."""
TORCH = {dtypes.bfloat16: torch.bfloat16, dtypes.float16: torch.float16}


def pins(block_m: int, block_n: int, stages: int, groups: int) -> dict:
    return {"products": "wgmma_tma", "block_m": block_m, "block_n": block_n, "stages": stages,
            "consumer_warpgroups": groups}


AT_SIZE = {
    (128, 2048, 2560): pins(64, 64, 4, 1),
    (512, 2048, 2048): pins(128, 64, 4, 2),
    (2048, 3584, 4608): pins(128, 192, 4, 2),
    (2048, 3584, 37888): pins(128, 256, 4, 2),
}
"""(M, K, N) of bf16 linears, and the setting the cost model picks for each."""


def linear16(m: int, k: int, n: int, dtype=dtypes.bfloat16) -> Case:
    """``x @ w.T`` of 16-bit ``x`` (m, k) and ``w`` (n, k), summed and stored in float32."""
    value = ex.op("mul", ex.cast(load("x", "i0", "r0", dtype=dtype), F32), ex.cast(load("w", "i1", "r0", dtype=dtype), F32))
    kernel = contraction("linear", {"x": (m, k), "w": (n, k)}, [("i0", m), ("i1", n)], ("r0", k), value,
                         ("out", (m, n)), input_dtype=dtype)
    return Case(f"linear_{dtype}", kernel, lambda x, w: x.float() @ w.float().T)


def matmul16(m: int, k: int, n: int) -> Case:
    """``x @ w`` with ``w`` (k, n): its n side is not K-major."""
    bf16 = dtypes.bfloat16
    value = ex.op("mul", ex.cast(load("x", "i0", "r0", dtype=bf16), F32), ex.cast(load("w", "r0", "i1", dtype=bf16), F32))
    kernel = contraction("matmul", {"x": (m, k), "w": (k, n)}, [("i0", m), ("i1", n)], ("r0", k), value,
                         ("out", (m, n)), input_dtype=bf16)
    return Case("matmul", kernel, lambda x, w: x.float() @ w.float())


SIMULATED = {
    "bf16_64x64_4_stages": (linear16(70, 136, 72), AT_SIZE[128, 2048, 2560]),
    "bf16_64x64_2_stages_the_ring_wraps": (linear16(70, 328, 72), pins(64, 64, 2, 1)),
    "bf16_64x64_12_stages_the_deepest_ring_wraps": (linear16(70, 904, 100), pins(64, 64, 12, 1)),
    "fp16_64x128_3_stages": (linear16(70, 136, 72, dtypes.float16), pins(64, 128, 3, 1)),
    "bf16_128x128_two_warpgroups": (linear16(130, 136, 72), pins(128, 128, 4, 2)),
    "bf16_128x256_two_warpgroups": (linear16(70, 136, 260), AT_SIZE[2048, 3584, 37888]),
    "bf16_128x64_two_slices_a_warpgroup": (linear16(130, 72, 72), AT_SIZE[512, 2048, 2048]),
    "fp16_64x256": (linear16(37, 200, 72, dtypes.float16), pins(64, 256, 2, 1)),
    "bf16_128x192_two_warpgroups": (linear16(130, 136, 200), AT_SIZE[2048, 3584, 4608]),
    "fp16_64x96": (linear16(70, 72, 100, dtypes.float16), pins(64, 96, 2, 1)),
    "bf16_blocks_down_groups_of_3_rows": (linear16(200, 72, 150), {**pins(64, 64, 2, 1), "grouped_rows": 3}),
    "bf16_odd_rows_through_shared_memory": (linear16(70, 136, 77), pins(64, 64, 2, 1)),
    "bf16_odd_rows_through_shared_memory_two_warpgroups": (linear16(130, 72, 201), pins(128, 128, 2, 2)),
    "bf16_n_major_64x64_2_stages": (matmul16(70, 136, 72), pins(64, 64, 2, 1)),
    "bf16_n_major_128x128_two_warpgroups": (matmul16(130, 200, 200), pins(128, 128, 3, 2)),
    "bf16_n_major_64x256": (matmul16(37, 72, 264), pins(64, 256, 2, 1)),
    "bf16_n_major_64x192": (matmul16(70, 136, 136), pins(64, 192, 2, 1)),
}


def product(case: Case):
    """The case's product in PyTorch: ``x @ w.T``, or ``x @ w`` where ``w`` is stored in by out."""
    return (lambda x, w: x @ w) if case.id == "matmul" else (lambda x, w: x @ w.T)


def assert_matches_eager_and_float64(case: Case, out: torch.Tensor, inputs: dict) -> None:
    """The product equal to eager's and to float64 within 1e-6 of the operands' scale."""
    x, w = inputs.values()
    torch.testing.assert_close(out, case.reference(x, w), rtol=1e-4, atol=1e-3)
    exact = float64_reference(product(case), (x, w))
    scale = product(case)(x.abs().double(), w.abs().double())
    assert ((out.double() - exact).abs() / scale).max() < 1e-6


def assert_runs_without_faults_and_compiles_without_spills(case: Case, kernel: kernel_ir.Kernel) -> None:
    """The kernel on the simulator matches eager and float64 with no fault, and NVRTC compiles it for
    sm_90a without spills or serialised wgmma."""
    compiling = start_compiling(kernel, "sm_90a")
    torch.manual_seed(0)
    inputs = case.inputs()
    out, report = simulate_case(case, kernel, inputs)
    assert report.faults == []
    assert_matches_eager_and_float64(case, out, inputs)
    compiled = compiling.result()
    assert compiled.registers > 0
    assert (compiled.spill_stores, compiled.spill_loads) == (0, 0)
    assert SERIALISED_WGMMA not in compiled.log


@pytest.mark.parametrize("name", SIMULATED)
def test_the_kernels_match_eager_and_float64_on_ragged_shapes_without_faults(name):
    case, knobs = SIMULATED[name]
    tile = SCHEDULE.schedule(case.kernel, SM_90, knobs)
    assert tile.settings.products == TMA
    assert_runs_without_faults_and_compiles_without_spills(case, SCHEDULE.lower(tile, SM_90))


def test_the_kernel_is_a_producer_and_consumers_on_a_ring_of_stages():
    tile = SCHEDULE.schedule(linear16(300, 200, 300).kernel, SM_90, pins(128, 128, 3, 2))
    kernel = SCHEDULE.lower(tile, SM_90)
    lines = [line.strip() for line in kernel_ir.format_kernel(kernel).splitlines()]
    assert kernel.launch.block == (384, 1, 1) and kernel.launch.grid == (3, 3, 1)
    operand_maps, (out_map,) = kernel.tensor_maps[:2], kernel.tensor_maps[2:]
    assert [m.box for m in operand_maps] == [(128, 64), (128, 64)]
    assert [(m.shape, m.row_stride, m.swizzle) for m in operand_maps] == [((300, 200), 200, 128)] * 2
    assert (out_map.param, out_map.shape, out_map.box, out_map.swizzle) == ("out", (300, 300), (128, 32), 128)
    statements = list(kernel_ir.statements(kernel.body))
    loads = [s for s in statements if isinstance(s, kernel_ir.TmaLoad)]
    assert len(loads) == 2
    arrive = next(s for s in statements if isinstance(s, kernel_ir.MbarrierArrive) and s.transaction_bytes)
    assert arrive.transaction_bytes == 2 * 128 * 64 * 2
    inits = [s for s in statements if isinstance(s, kernel_ir.MbarrierInit)]
    assert sorted({(s.barrier, s.arrivals) for s in inits}) == [("empty", 256), ("full", 1)]
    wgmma = [s for s in statements if isinstance(s, kernel_ir.Wgmma)]
    assert len(wgmma) == 4 and {(s.n, s.operand_dtype, s.a_from) for s in wgmma} == {(128, dtypes.bfloat16, "shared")}
    order = ["wgmma fence", "wgmma commit", "wgmma wait (at most 1 pending)"]
    place = 0
    for line in order:
        place = lines.index(line, place + 1)


def _planted(change):
    case, knobs = SIMULATED["bf16_64x64_2_stages_the_ring_wraps"]
    kernel = SCHEDULE.lower(SCHEDULE.schedule(case.kernel, SM_90, knobs), SM_90)
    return case, attrs.evolve(kernel, body=rewritten(kernel.body, change))


def test_a_stage_released_before_its_wgmma_complete_is_a_race_the_simulator_reports():
    case, kernel = _planted(lambda s: [] if s == kernel_ir.WgmmaWait(1) else [s])
    torch.manual_seed(0)
    with pytest.raises(SimulationError, match="while `wgmma m64n64k16 bf16"):
        simulate_case(case, kernel, case.inputs())


def test_a_wrong_transaction_count_is_a_deadlock_the_simulator_reports():
    def more_bytes(s):
        if isinstance(s, kernel_ir.MbarrierArrive) and s.transaction_bytes:
            return [attrs.evolve(s, transaction_bytes=s.transaction_bytes + 2)]
        return [s]

    case, kernel = _planted(more_bytes)
    torch.manual_seed(0)
    with pytest.raises(SimulationError, match="deadlock"):
        simulate_case(case, kernel, case.inputs())


def test_the_cost_model_picks_wgmma_tma_for_16_bit_linears():
    for (m, k, n), knobs in AT_SIZE.items():
        tile = SCHEDULE.schedule(linear16(m, k, n).kernel, SM_90, {})
        assert tile.settings.products == TMA, (m, k, n)
        chosen = dict(tile.knobs)["chosen"]
        groups = knobs["consumer_warpgroups"]
        assert chosen.startswith(
            f"block {knobs['block_m']}x{knobs['block_n']}x64, {knobs['stages']} stages, {groups} consumer "
            f"warpgroup{'s' if groups > 1 else ''}, on tensor cores through TMA and wgmma; cheapest of"), (m, k, n)


@pytest.mark.parametrize("m, k, n", [(1, 4096, 4096), (1, 2048, 5632), (16, 64, 16), (63, 2048, 2048)])
def test_decoding_and_tiny_products_keep_the_cuda_cores(m, k, n):
    tile = SCHEDULE.schedule(linear16(m, k, n).kernel, SM_90, {})
    assert tile.settings.products is None


def test_float32_sm_80_and_operands_the_tma_cannot_read_never_get_it():
    """Sixteen-bit operands the TMA cannot read (rows not 16 bytes apart, either way) are staged for
    wgmma by the block's threads instead."""
    assert SCHEDULE.schedule(linear(2048, 2048, 2048).kernel, SM_90, {}).settings.products == "wgmma 3xtf32"
    assert SCHEDULE.schedule(linear16(2048, 2048, 2048).kernel, SM_80, {}).settings.products is None
    assert SCHEDULE.schedule(linear16(2048, 2044, 2048).kernel, SM_90, {}).settings.products == "wgmma 16-bit"
    assert SCHEDULE.schedule(matmul16(2048, 2048, 2044).kernel, SM_90, {}).settings.products == "wgmma 16-bit"


def test_a_weight_stored_in_by_out_is_read_as_it_lies_in_panels_of_n():
    """``x @ w`` with ``w`` (k, n), as GPT-2's ``Conv1D`` stores it: B is staged along n, 64
    columns to a TMA box, and the wgmma transposes it; only blocks of whole panels run."""
    tile = SCHEDULE.schedule(matmul16(2048, 2048, 2048).kernel, SM_90, {})
    assert (tile.settings.products, tile.settings.b_layout) == (TMA, "n_major")
    assert tile.stages[1].dims == ("r0", "i1") and tile.stages[1].tile[0] == 64
    assert "B n-major: staged as it lies, along n, in panels of 64 columns" in tile_ir.format_tile_kernel(tile)
    kernel = SCHEDULE.lower(tile, SM_90)
    wgmma = [s for s in kernel_ir.statements(kernel.body) if isinstance(s, kernel_ir.Wgmma)]
    assert {s.b_layout for s in wgmma} == {"n_major"}
    with pytest.raises(ScheduleError, match="in panels of 64 columns: it takes blocks of 64, 128, 192, 256 columns"):
        SCHEDULE.schedule(matmul16(256, 256, 256).kernel, SM_90, pins(64, 96, 2, 1))


@pytest.mark.parametrize("case, knobs, reason", [
    (matmul16(256, 256, 260), {"products": "wgmma_tma"},
     "w[r0, i1]'s rows along r0 are 260 elements (520 bytes) apart: the TMA needs them at least 260 elements"),
    (linear16(256, 140, 256), {"products": "wgmma_tma"},
     "rows are 140 elements (280 bytes) apart: the TMA needs rows at least 140 elements and a multiple of 16 bytes"),
    (linear(256, 256, 256), {"products": "wgmma_tma"}, "needs a float32 sum of products of two bf16 or two fp16"),
    (linear16(256, 256, 256), pins(64, 64, 4, 2), "2 consumer warpgroups of 64-row wgmma do not share 64 rows"),
    (linear16(256, 256, 256), pins(128, 256, 4, 1), "holds 256 accumulators per thread; at most 128"),
    (linear16(256, 256, 256), pins(128, 256, 5, 2), "5 stages of 128x256 blocks take 245840 B of shared memory"),
    (linear16(256, 256, 256), pins(128, 128, 8, 2), "8 stages of 128x128 blocks take"),
    (linear16(256, 256, 256), {**pins(64, 64, 4, 1), "buffers": 2}, "products = wgmma_tma in 64x64 blocks takes buffers = 1"),
    (linear(256, 256, 256), {"stages": 3}, "needs a float32 sum of products of two bf16 or two fp16"),
])
def test_pins_that_cannot_run_are_refused_with_the_pins_and_the_reason(case, knobs, reason):
    with pytest.raises(ScheduleError) as caught:
        SCHEDULE.schedule(case.kernel, SM_90, knobs)
    message = str(caught.value)
    assert reason in message
    assert all(f"{k} = {v}" in message for k, v in knobs.items() if k != "products")


@pytest.mark.parametrize("knobs, message", [
    ({"stages": 13}, "knob stages = 13 must be 2 to 12"),
    ({"consumer_warpgroups": 3}, "knob consumer_warpgroups = 3 must be 1 or 2"),
])
def test_illegal_knob_values_are_refused(knobs, message):
    with pytest.raises(ScheduleError, match=message):
        SCHEDULE.schedule(linear16(256, 256, 256).kernel, SM_90, knobs)


def test_a_bf16_linear_runs_on_it_unless_other_products_are_pinned():
    layer = torch.nn.Linear(256, 192).to(torch.bfloat16)
    x = torch.randn(128, 256, dtype=torch.bfloat16)

    def products(**options):
        (tile,) = [t for t in lamina.compile(layer, (x,), **options).compilation.tiles if t.schedule == "contraction"]
        return tile.settings.products

    assert products() == TMA
    assert products(knobs={"contraction": {"products": "fma"}}) != TMA


def test_wgmma_tma_needs_hopper():
    with pytest.raises(ScheduleError, match="products = wgmma_tma needs Hopper's TMA and wgmma"):
        SCHEDULE.schedule(linear16(256, 256, 256).kernel, SM_80, {"products": "wgmma_tma"})


def test_an_nn_linear_in_bf16_chooses_it_and_the_tile_ir_says_so():
    """Compiled only (the simulator would take too long at this size): the Tile IR's lines."""
    layer = torch.nn.Linear(3584, 4608, bias=True).to(torch.bfloat16)
    x = torch.randn(2048, 3584, dtype=torch.bfloat16)
    compiled = lamina.compile(layer, (x,))
    (tile,) = [t for t in compiled.compilation.tiles if t.schedule == "contraction"]
    text = tile_ir.format_tile_kernel(tile).splitlines()
    assert text[1:] == [
        "  grid (24, 16, 1) blocks of 384 threads, 213056 B shared",
        "  parallel i1 (4608): block.x tile 192 = thread.x 4 x 48 per thread (grouped by 2, groups 8 apart)",
        "  parallel i0 (2048): block.y tile 128 = thread.y 64 x 2 per thread (strided by 64)",
        "  reduce r0 (3584): serial, step 64",
        "  shared input[i0, r0] as bf16[i0 128][r0 64, 128-byte swizzle], 4 buffers, copy tma 16384 B",
        "  shared p_weight[i1, r0] as bf16[i1 192][r0 64, 128-byte swizzle], 4 buffers, copy tma 24576 B",
        "  blocks run down groups of 11 grid rows, column by column",
        "  copies: one thread of a producer warpgroup issues each stage's TMA loads (zero-filled past the edges), in a "
        "ring of 4 stages, each guarded by a full and an empty mbarrier",
        "  products on tensor cores: wgmma m64n192k16 on bf16 from swizzled shared memory, 2 consumer warpgroups of 64 "
        "rows each, f32 accumulators; a stage is released once the wgmma of the next have started",
        "  outputs stored by the TMA: the consumers put the epilogue's values in a shared tile (3 panels of 64 columns "
        "in the 128-byte swizzle), then one thread copies it out in 3 TMA stores, which write only what lies inside "
        "the output",
        "  register_tile = 2x48",
        "  epilogue_stores = 2 adjacent outputs per store (4 B) into a shared tile, which the TMA copies out",
        "  chosen = block 128x192x64, 4 stages, 2 consumer warpgroups, on tensor cores through TMA and wgmma; cheapest "
        "of 79 settings (the CUDA cores', at least 1398.2 us, not weighed), pinned: none",
        "  estimate = 126.5 us from launch 2.0, compute 113.3 and memory 44.8, overlapped; 384 blocks, 1 per SM at once",
        "  block_order = 16x24 blocks, 132 at once: down groups of 11 rows",
    ]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fused_epilogues_compile_for_sm_90a_without_spills_in_every_setting_the_model_picks(dtype):
    """The heaviest epilogue of the suite's linears (bias, gelu, residual, cast) on the most accumulators."""
    x, w = torch.randn(300, 200, dtype=dtype), torch.randn(520, 200, dtype=dtype)
    bias, residual = torch.randn(520, dtype=dtype), torch.randn(300, 520, dtype=dtype)

    def program(x, w, bias, residual):
        return F.gelu(F.linear(x, w, bias)) + residual

    compiling = []
    for knobs in AT_SIZE.values():
        compiled = lamina.compile(program, (x, w, bias, residual), knobs={"contraction": knobs})
        (kernel,) = [k for k in compiled.compilation.kernels.kernels if k.tensor_maps]
        compiling.append(start_compiling(kernel, "sm_90a"))
    for future in compiling:
        result = future.result()
        assert (result.spill_stores, result.spill_loads) == (0, 0)


SMALL = {"contraction": pins(64, 64, 2, 1)}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_linear_with_bias_and_gelu_matches_eager_on_the_simulator(dtype):
    torch.manual_seed(0)
    layer = torch.nn.Linear(136, 72, bias=True).to(dtype)
    x = torch.randn(70, 136, dtype=dtype)

    def program(x):
        return F.gelu(layer(x))

    compiled = lamina.compile(program, (x,), knobs=SMALL)
    assert [t.settings.products for t in compiled.compilation.tiles] == [TMA]
    out = compiled(x)
    eager = program(x)
    torch.testing.assert_close(out, eager, rtol=1.6e-2, atol=1e-2)
    reference = float64_reference(lambda x, w, b: F.gelu(x @ w.T + b), (x, layer.weight, layer.bias))
    assert relative_error(out, reference) < 1.5 * relative_error(eager, reference) + 1e-3


def test_a_residual_add_after_silu_in_bf16_matches_eager_on_the_simulator():
    torch.manual_seed(1)
    x, w = torch.randn(70, 136, dtype=torch.bfloat16), torch.randn(72, 136, dtype=torch.bfloat16)
    residual = torch.randn(70, 72, dtype=torch.bfloat16)

    def program(x, w, residual):
        return F.silu(x @ w.T) + residual

    compiled = lamina.compile(program, (x, w, residual), knobs={"contraction": pins(128, 64, 3, 1)})
    assert [t.settings.products for t in compiled.compilation.tiles] == [TMA]
    out = compiled(x, w, residual)
    torch.testing.assert_close(out, program(x, w, residual), rtol=1.6e-2, atol=2e-2)


def test_a_batched_matmul_in_bf16_matches_eager_on_the_simulator():
    """Each batch's rows continue the tensor map's rows; the rows a box takes from the next batch
    reach only the outputs past the edge, which are not stored."""
    torch.manual_seed(2)
    a, b = torch.randn(2, 70, 136, dtype=torch.bfloat16), torch.randn(2, 72, 136, dtype=torch.bfloat16)

    def program(a, b):
        return torch.matmul(a, b.transpose(-1, -2))

    compiled = lamina.compile(program, (a, b), knobs=SMALL)
    assert [t.settings.products for t in compiled.compilation.tiles] == [TMA]
    out = compiled(a, b)
    torch.testing.assert_close(out, program(a, b), rtol=1.6e-2, atol=1e-2)


def test_operands_widened_and_scaled_by_one_are_read_as_they_lie():
    """PyTorch's attention math with a scale of 1 (T5's) multiplies each operand, widened to
    float32, by 1.0: the products are still those of the 16-bit values, so they run on it."""
    torch.manual_seed(2)
    q, k = torch.randn(2, 70, 64, dtype=torch.bfloat16), torch.randn(2, 72, 64, dtype=torch.bfloat16)

    def program(q, k):
        return torch.bmm(q.float() * 1.0, k.float().transpose(-1, -2) * 1.0)

    compiled = lamina.compile(program, (q, k), knobs=SMALL)
    assert [t.settings.products for t in compiled.compilation.tiles] == [TMA]
    reference = float64_reference(program, (q, k))
    assert relative_error(compiled(q, k), reference) <= 1.25 * relative_error(program(q, k), reference) + 1e-6


def test_causal_attention_scores_in_bf16_match_eager_on_the_simulator():
    """The scores' product (its reduction, the head dimension, one k-tile) kept apart from the softmax,
    the scale and the causal mask in its epilogue or in the softmax after it."""
    def scores_causal(q, k):
        s = q @ k.transpose(-1, -2) * 0.125
        mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1)
        return torch.softmax(s.masked_fill(mask, float("-inf")), -1)

    torch.manual_seed(3)
    q, k = torch.randn(1, 2, 70, 64, dtype=torch.bfloat16), torch.randn(1, 2, 70, 64, dtype=torch.bfloat16)
    apart = ("lamina.builtin.schedules.matmul_row_reduction",)
    compiled = lamina.compile(scores_causal, (q, k), knobs=SMALL, disable=apart)
    assert TMA in [t.settings.products if t.settings else None for t in compiled.compilation.tiles]
    out = compiled(q, k)
    torch.testing.assert_close(out, scores_causal(q, k), rtol=1.6e-2, atol=1e-2)


def test_scores_of_grouped_key_heads_run_on_it_and_match_eager_on_the_simulator():
    """Query head ``h`` reads key head ``h // 2`` (grouped-query attention): the key's first row in
    a batch is a function of the head, not a multiple of it, and the tensor map still covers it."""
    def grouped_scores(q, k):
        return q @ k.repeat_interleave(2, dim=1).transpose(-1, -2)

    torch.manual_seed(4)
    q, k = torch.randn(1, 4, 70, 72, dtype=torch.bfloat16), torch.randn(1, 2, 45, 72, dtype=torch.bfloat16)
    compiled = lamina.compile(grouped_scores, (q, k), knobs=SMALL)
    assert "// 2" in compiled.ir("loop")
    assert [t.settings.products for t in compiled.compilation.tiles] == [TMA]
    torch.testing.assert_close(compiled(q, k), grouped_scores(q, k), rtol=1.6e-2, atol=1e-2)


def test_attention_in_bf16_runs_both_products_on_it_and_matches_eager_on_the_simulator():
    """The probabilities are rounded to bf16, as eager's kernels round them, and the values are
    copied with the positions last (K-major for the second product, ``k_major_operands``): both of
    attention's products run on the TMA GEMM, at a length and head size no tile divides."""
    torch.manual_seed(5)
    q, k, v = (torch.randn(1, 2, 136, 72, dtype=torch.bfloat16) for _ in range(3))

    def attention(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    compiled = lamina.compile(attention, (q, k, v), knobs=SMALL, disable=THREE_KERNELS)
    assert [t.settings.products for t in compiled.compilation.tiles if t.schedule == "contraction"] == [TMA, TMA]
    assert "buffer v_k_major: bf16[2, 72, 136]" in compiled.ir("loop")  # per head, the positions last
    expected = attention(*(t.double() for t in (q, k, v)))
    lamina_error = relative_error(compiled(q, k, v), expected)
    eager_error = relative_error(attention(q, k, v), expected)
    assert lamina_error <= 1.25 * eager_error, (lamina_error, eager_error)


def test_a_weight_stored_in_by_out_is_read_as_it_lies_and_the_product_runs_on_it():
    """``x @ w`` with ``w`` stored in by out (GPT-2's ``Conv1D``): one kernel, which reads ``w``
    along n; a weight whose rows the TMA cannot read (not 16 bytes apart) is copied K-major."""
    torch.manual_seed(7)
    x, w = torch.randn(2, 100, 136, dtype=torch.bfloat16), torch.randn(136, 72, dtype=torch.bfloat16)
    compiled = lamina.compile(lambda x, w: x @ w, (x, w), knobs=SMALL)
    assert "k_major" not in compiled.ir("loop")
    assert [(t.settings.products, t.settings.b_layout) for t in compiled.compilation.tiles] == [(TMA, "n_major")]
    torch.testing.assert_close(compiled(x, w), x @ w, rtol=1.6e-2, atol=1e-2)
    w = torch.randn(136, 70, dtype=torch.bfloat16)
    compiled = lamina.compile(lambda x, w: x @ w, (x, w), knobs=SMALL)
    assert "buffer w_k_major: bf16[70, 136]" in compiled.ir("loop")
    torch.testing.assert_close(compiled(x, w), x @ w, rtol=1.6e-2, atol=1e-2)


@pytest.mark.parametrize("program, shapes", [
    (lambda x, w: x @ w, ((2, 3, 70, 128), (2, 3, 128, 72))),
    (lambda p, v: p @ v.repeat_interleave(2, dim=1), ((1, 4, 70, 128), (1, 2, 128, 64))),
], ids=["batched", "grouped_heads"])
def test_batches_of_b_that_lie_along_n_are_read_in_place_and_match_float64(program, shapes):
    """Each batch's B (a head's values, shared by two query heads) starts on its own rows of k:
    the tensor map's rows cover every batch, and 128 rows of k end where the next batch begins."""
    torch.manual_seed(1)
    args = tuple(torch.randn(shape, dtype=torch.bfloat16) for shape in shapes)
    compiled = lamina.compile(program, args, knobs=SMALL)
    assert [(t.settings.products, t.settings.b_layout) for t in compiled.compilation.tiles] == [(TMA, "n_major")]
    reference = float64_reference(program, args)
    assert relative_error(compiled(*args), reference) <= 1.25 * relative_error(program(*args), reference)


def test_outputs_whose_rows_break_aligned_pairs_go_through_a_shared_tile():
    """GPT-2's LM head (an odd number of words to a row of bf16 logits): the consumers put the
    outputs in a shared tile and the whole block writes it out a row at a time; where the row
    length allows pairs the TMA stores the tile, and with persistent blocks the consumers store
    the outputs directly."""
    tile = SCHEDULE.schedule(linear16(512, 768, 50257).kernel, SM_90, {})
    assert tile.settings.staged_output_bytes > 0
    printed = tile_ir.format_tile_kernel(tile)
    assert "outputs through shared memory" in printed
    assert "epilogue_stores = one output per store (4 B), from a shared tile" in printed  # float32 sums
    kernel = SCHEDULE.lower(tile, SM_90)
    assert sum(isinstance(s, kernel_ir.Barrier) for s in kernel.body) == 2
    assert SCHEDULE.schedule(linear16(512, 768, 50304).kernel, SM_90, {}).settings.staged_output_copy == "tma"
    persistent = {**pins(128, 128, 4, 1), "tile_scheduler": "persistent"}
    assert SCHEDULE.schedule(linear16(512, 768, 50257).kernel, SM_90, persistent).settings.staged_output_bytes == 0


def test_a_decoding_step_keeps_its_operands_as_they_lie():
    """Fewer than 64 rows: the TMA GEMM does not take the product, so nothing is copied."""
    x, w = torch.randn(1, 256, dtype=torch.bfloat16), torch.randn(256, 192, dtype=torch.bfloat16)
    compiled = lamina.compile(lambda x, w: x @ w, (x, w), target="sm_90")
    assert "k_major" not in compiled.ir("loop")


def test_values_also_returned_are_copied_k_major_for_the_product():
    """The values are a program output too (as a key-value cache returns them): the product reads a
    copy with the positions last, and both outputs are right."""
    def attention_and_values(q, k, v):
        values = v * 2
        return F.scaled_dot_product_attention(q, k, values, is_causal=True), values

    torch.manual_seed(6)
    q, k, v = (torch.randn(1, 2, 136, 72, dtype=torch.bfloat16) for _ in range(3))
    compiled = lamina.compile(attention_and_values, (q, k, v), knobs=SMALL)
    assert "buffer mul_k_major: bf16[2, 72, 136]" in compiled.ir("loop")
    out, values = compiled(q, k, v)
    assert torch.equal(values, v * 2)
    expected = attention_and_values(*(t.double() for t in (q, k, v)))[0]
    assert relative_error(out, expected) <= 1.25 * relative_error(attention_and_values(q, k, v)[0], expected)


GPU_SHAPES = [(128, 2048, 2560), (2048, 3584, 4608), (2048, 2048, 2000), (333, 1032, 700)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m, k, n", GPU_SHAPES)
def test_linears_with_bias_and_gelu_match_eager_on_the_gpu(m, k, n, dtype):
    torch.manual_seed(0)
    x, w = torch.randn(m, k, dtype=dtype, device="cuda"), torch.randn(n, k, dtype=dtype, device="cuda") / k ** 0.5
    bias = torch.randn(n, dtype=dtype, device="cuda")

    def program(x, w, bias):
        return F.gelu(F.linear(x, w, bias))

    compiled = lamina.compile(program, (x, w, bias))
    assert TMA in [t.settings.products if t.settings else None for t in compiled.compilation.tiles]
    out = compiled(x, w, bias)
    eager = program(x, w, bias)
    reference = float64_reference(program, (x, w, bias))
    assert relative_error(out, reference) < 1.5 * relative_error(eager, reference) + 1e-4


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("heads, key_heads, length", [(8, 8, 512), (16, 8, 2048), (4, 2, 200)])
def test_attention_runs_both_products_on_it_and_matches_eager_on_the_gpu(heads, key_heads, length, dtype):
    """Through ``torch.compile``, as models call it: a rotated query, grouped key heads and a
    causal mask; both products on the TMA GEMM where the length lets the TMA read its rows."""
    torch.manual_seed(0)
    q = torch.randn(2, heads, length, 128, dtype=dtype, device="cuda")
    k, v = (torch.randn(2, key_heads, length, 128, dtype=dtype, device="cuda") for _ in range(2))
    cos, sin = torch.randn(length, 128, dtype=dtype, device="cuda"), torch.randn(length, 128, dtype=dtype, device="cuda")

    def attention(q, k, v, cos, sin):
        rotated = q * cos + torch.cat([-q[..., 64:], q[..., :64]], -1) * sin
        return F.scaled_dot_product_attention(rotated, k, v, is_causal=True, enable_gqa=heads != key_heads)

    args = (q, k, v, cos, sin)
    out = torch.compile(attention, backend="lamina", dynamic=False)(*args)
    reference = float64_reference(attention, args)
    assert relative_error(out, reference) <= 1.25 * relative_error(attention(*args), reference)
    if length % 8 == 0:  # as three kernels (the attention schedule fuses them where it expects to gain)
        compiled = lamina.compile(attention, args, disable=THREE_KERNELS)
        products = [t.settings.products for t in compiled.compilation.tiles if t.schedule == "contraction"]
        assert products == [TMA, TMA], products
        reference = float64_reference(attention, args)
        assert relative_error(compiled(*args), reference) <= 1.25 * relative_error(attention(*args), reference)


@pytest.mark.gpu
@pytest.mark.parametrize("name", SIMULATED)
def test_the_simulated_settings_match_eager_on_the_gpu(name):
    case, knobs = SIMULATED[name]
    x, w = (torch.randn(b.type.shape, dtype=TORCH[b.type.dtype], device="cuda") for b in case.kernel.inputs)
    compiled = lamina.compile(product(case), (x, w), knobs={"contraction": knobs})
    assert TMA in [t.settings.products if t.settings else None for t in compiled.compilation.tiles]
    out = compiled(x, w)
    reference = float64_reference(product(case), (x, w))
    assert relative_error(out, reference) < 1.5 * relative_error(product(case)(x, w), reference) + 1e-4


@pytest.mark.parametrize("k, splits", [(448, 2), (384, 3)])
def test_split_k_slices_of_whole_k_tiles_run_on_it(k, splits):
    """448 in two: slices of 256 and 192 (64s, the TMA's k-tiles); the last k-tile of a slice never
    reads the next slice's columns, and the last slice's reads past K are zeros."""
    torch.manual_seed(0)
    x, w = torch.randn(130, k, dtype=torch.bfloat16), torch.randn(72, k, dtype=torch.bfloat16)
    knobs = {"contraction": {**pins(64, 64, 2, 1), "split_k": splits}}
    compiled = lamina.compile(lambda x, w: x @ w.T, (x, w), knobs=knobs)
    partial, _ = compiled.compilation.tiles
    assert partial.settings.products == TMA and dict(partial.knobs)["split_k"].startswith(f"{splits} (partial sums")
    compiling = start_compiling(SCHEDULE.lower(partial, SM_90), "sm_90a")
    exact = float64_reference(lambda x, w: x @ w.T, (x, w))
    assert relative_error(compiled(x, w), exact) < 1.5 * relative_error(x @ w.T, exact) + 1e-4
    assert (compiling.result().spill_stores, compiling.result().spill_loads) == (0, 0)


def test_skinny_projections_split_k_into_64_deep_slices_on_it():
    """TinyLlama's key projection at 128 rows: 8 blocks of 64 x 64 leave most SMs idle unsplit."""
    x, w = torch.randn(128, 2048, dtype=torch.bfloat16), torch.randn(256, 2048, dtype=torch.bfloat16)
    compiled = lamina.compile(lambda x, w: F.linear(x, w), (x, w))
    partial = compiled.compilation.tiles[0]
    assert partial.settings.products == TMA and partial.kernel.name.endswith("_partials")
    loop = next(line for line in tile_ir.format_tile_kernel(partial).splitlines() if "reduce r0" in line)
    assert int(loop.split("(")[1].split(")")[0]) % 64 == 0

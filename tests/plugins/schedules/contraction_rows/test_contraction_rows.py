"""Softmax over a contraction's rows in one kernel: fusion, Tile IR, every setting on the simulator, NVRTC."""

import math

import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.backends.cuda.codegen import emit_cuda, kernel_symbol
from lamina.backends.cuda.nvrtc import compile_kernel
from lamina.backends.reference.simulator import simulate
from lamina.bench.measure import float64_reference, relative_error
from lamina.core.errors import ScheduleError
from lamina.core.ir import expr as ex, kernel_ir, loop_ir, tile_ir
from lamina.core.target import Target
from lamina.plugins.schedules.contraction_rows.plugin import ContractionRowsSchedule
from lamina.plugins.schedules.contraction_rows.recognise import analyse
from lamina.plugins.schedules.contraction_rows.tiling import MAX_CLUSTER_ROW_LENGTH, MAX_ROW_LENGTH, settings

SM_90 = Target("sm_90", "sm_90")
SCHEDULE = ContractionRowsSchedule()


def scores(q, k):
    return torch.softmax(q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5, -1)


def masked_scores(q, k, mask):
    return torch.softmax((q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5).masked_fill(mask, float("-inf")), -1)


def classifier(x, w, b):
    return torch.softmax(F.linear(x, w, b), -1)


def log_probabilities(q, k):
    return torch.log_softmax(q @ k.transpose(-1, -2) * 0.3, -1)


def normalised_rows(q, k):
    s = q @ k.transpose(-1, -2)
    return s * torch.rsqrt((s * s).mean(-1, keepdim=True) + 1e-6)


def causal_mask(n):
    return torch.ones(n, n, dtype=torch.bool).triu(1)


PROGRAMS = {
    "scores_37_columns": (scores, lambda: (torch.randn(1, 2, 37, 20), torch.randn(1, 2, 37, 20))),
    "causal_scores_45": (masked_scores, lambda: (torch.randn(2, 45, 16), torch.randn(2, 45, 16), causal_mask(45))),
    "scores_130_columns": (scores, lambda: (torch.randn(2, 19, 12), torch.randn(2, 130, 12))),
    "scores_longest_rows": (scores, lambda: (torch.randn(1, 3, 8), torch.randn(1, MAX_ROW_LENGTH, 8))),
    "scores_300_columns_in_a_cluster": (scores, lambda: (torch.randn(1, 2, 70, 8), torch.randn(1, 2, 300, 8))),
    "causal_scores_600_in_a_cluster": (masked_scores, lambda: (torch.randn(1, 600, 4), torch.randn(1, 600, 4),
                                                                causal_mask(600))),
    "log_softmax_300_in_a_cluster": (log_probabilities, lambda: (torch.randn(1, 2, 40, 8), torch.randn(1, 2, 300, 8))),
    "normalised_rows_300_in_a_cluster": (normalised_rows, lambda: (torch.randn(1, 40, 8), torch.randn(1, 300, 8))),
    "classifier_10_classes": (classifier, lambda: (torch.randn(21, 30), torch.randn(10, 30), torch.randn(10))),
}


def fused_kernel(name):
    fn, inputs = PROGRAMS[name]
    args = inputs()
    program = lamina.compile(fn, args)
    (kernel,) = program.compilation.loop.kernels
    names = [b.name for b in program.compilation.loop.inputs]
    return program, kernel, dict(zip(names, args)), fn


def simulated(kernel, loop_kernel, inputs):
    arrays = {name: t.reshape(-1).clone() for name, t in inputs.items()}
    (out,) = loop_kernel.outputs
    arrays[out.name] = torch.full((math.prod(out.type.shape),), float("nan"))
    report = simulate(kernel, arrays, raise_on_fault=True)
    return arrays[out.name].reshape(out.type.shape), report


@pytest.mark.parametrize("name", PROGRAMS)
def test_the_product_and_its_softmax_are_one_kernel_that_matches_pytorch(name):
    program, _, inputs, fn = fused_kernel(name)
    assert [t.schedule for t in program.compilation.tiles] == ["contraction_rows"]
    assert program.compilation.loop.temporaries == ()
    out = program(*inputs.values())
    assert relative_error(out, float64_reference(fn, tuple(inputs.values()))) < 1e-5


SETTINGS = []
for _name in PROGRAMS:
    _, _kernel, _, _ = fused_kernel(_name)
    SETTINGS += [(_name, choices) for choices in settings(analyse(_kernel), SM_90)]


def _id(name, c):
    return f"{name}-{c.block_m}x{c.block_n}x{c.block_k}-t{c.thread_m}x{c.thread_n}-b{c.buffers}-f{c.fragment_width}"


def test_the_settings_stay_few_enough_to_run_each():
    assert len(SETTINGS) < 40


@pytest.mark.parametrize("name, choices", SETTINGS, ids=[_id(n, c) for n, c in SETTINGS])
def test_every_setting_matches_pytorch_without_faults_or_bank_conflicts_and_compiles_without_spills(name, choices):
    _, loop_kernel, inputs, fn = fused_kernel(name)
    knobs = {"block_m": choices.block_m, "thread_m": choices.thread_m, "block_k": choices.block_k,
             "buffers": choices.buffers, "fragment_width": choices.fragment_width}
    tile = SCHEDULE.schedule(loop_kernel, SM_90, knobs)
    assert f"block {choices.block_m}x{choices.block_n}x{choices.block_k}" in dict(tile.knobs)["chosen"]
    kernel = SCHEDULE.lower(tile, SM_90)
    out, report = simulated(kernel, loop_kernel, inputs)
    assert relative_error(out, float64_reference(fn, tuple(inputs.values()))) < 1e-5
    assert (report.races, report.out_of_bounds, report.unwritten_reads, report.misaligned) == ([], [], [], [])
    assert report.total_bank_conflicts == 0, report.bank_conflicts
    compiled = compile_kernel(emit_cuda(kernel), kernel_symbol(kernel), "sm_90")
    assert (compiled.spill_stores, compiled.spill_loads) == (0, 0)


@pytest.mark.parametrize("heads, d", [(32, 64), (28, 128)], ids=["tinyllama", "qwen"])
@pytest.mark.parametrize("fn", [scores, masked_scores], ids=["plain", "causal"])
def test_the_suites_scores_at_128_tokens_compile_without_spills(heads, d, fn):
    args = (torch.randn(1, heads, 128, d), torch.randn(1, heads, 128, d))
    program = lamina.compile(fn, args + ((causal_mask(128),) if fn is masked_scores else ()))
    assert [t.schedule for t in program.compilation.tiles] == ["contraction_rows"]
    (kernel,) = program.compilation.kernels.kernels
    compiled = compile_kernel(program.compilation.sources[kernel.name], kernel.name, "sm_90")
    assert (compiled.spill_stores, compiled.spill_loads) == (0, 0)


CAUSAL_LOOP_IR = """\
kernel softmax(q: f32[2, 12, 8], k: f32[2, 12, 8], mask: b8[12, 12]) -> (softmax: f32[2, 12, 12]):
  for i0 in parallel(2):
    for i1 in parallel(12):
      acc0: f32 = -inf
      for r0 in reduce(12):
        bmm: f32 = 0.0
        for r2 in reduce(8):
          bmm += q[i0, i1, r2] * k[i0, r0, r2]
        acc0 = max(acc0, where(mask[i1, r0], -inf, bmm * 0.3535533905932738))
      acc1: f32 = 0.0
      for r1 in reduce(12):
        bmm2: f32 = 0.0
        for r3 in reduce(8):
          bmm2 += q[i0, i1, r3] * k[i0, r1, r3]
        acc1 += exp(where(mask[i1, r1], -inf, bmm2 * 0.3535533905932738) - acc0)
      for i2 in serial(12):
        bmm3: f32 = 0.0
        for r4 in reduce(8):
          bmm3 += q[i0, i1, r4] * k[i0, i2, r4]
        softmax[i0, i1, i2] = exp(where(mask[i1, i2], -inf, bmm3 * 0.3535533905932738) - acc0) / acc1"""

CAUSAL_TILE_IR = """\
tile softmax  schedule=contraction_rows
  grid (1, 1, 2) blocks of 256 threads, 1696 B shared
  parallel i1 (12): block.y tile 16 = thread.y 8 x 2 per thread (strided by 8)
  parallel i0 (2): block.z tile 1 = thread.z 1 x 1 per thread (contiguous)
  reduce r0 * r1 (12): warp_shuffle, 32 splits
  shared q[i0, i1, r4] as f32[r4 8][i1 16 + pad 4], 1 buffer, copy cp.async 4 B
  shared k[i0, i2, r4] as f32[r4 8][i2 32 + pad 1], 1 buffer, copy cp.async 4 B
  row = 12 columns across a warp: 32 lanes x 1 per lane (32 apart)
  product = bmm3 = sum over r4 (8) in k-tiles of 8, computed once per element and kept in registers
  element = where(mask[i1, i2], -inf, bmm3 * 0.3535533905932738), computed once per element in place of bmm3
  row_reductions = acc0 max, acc1 sum, each lane's part combined by warp shuffles
  register_tile = 2x1
  chosen = block 16x32x8, thread 2x1, splits 1, buffers 1, fragment width 1; cheapest of 3 settings spanning the row, pinned: none
  estimate = 2.2 us from launch 2.0, compute 0.2 and memory 0.1, overlapped; 2 blocks, 6 per SM at once
  copy q[i0, i1, r4] = r4 fastest across threads
  copy k[i0, i2, r4] = r4 fastest across threads, a warp's i2 8 apart"""


def test_causal_scores_loop_ir_and_tile_ir_golden():
    program = lamina.compile(masked_scores, (torch.randn(2, 12, 8), torch.randn(2, 12, 8), causal_mask(12)))
    (kernel,) = program.compilation.loop.kernels
    assert loop_ir.format_kernel(kernel) == CAUSAL_LOOP_IR
    assert tile_ir.format_tile_kernel(program.compilation.tiles[0]) == CAUSAL_TILE_IR


def test_the_stores_multiply_by_the_reciprocal_of_the_row_sum_computed_once_per_row():
    """A masked score's dividend is zero, which sends IEEE division down its slow path."""
    _, loop_kernel, _, _ = fused_kernel("causal_scores_45")
    kernel = SCHEDULE.lower(SCHEDULE.schedule(loop_kernel, SM_90, {}), SM_90)
    stores = [s for s in kernel_ir.statements(kernel.body) if isinstance(s, kernel_ir.Store)]
    divisions = [s for s in stores for node in ex.walk(s.value) if isinstance(node, ex.Op) and node.op == "div"]
    rows_per_thread = [b.per_thread for b in SCHEDULE.schedule(loop_kernel, SM_90, {}).grid if b.block_dim == "y"]
    assert [s.array for s in divisions] == ["acc1_reciprocal"] * rows_per_thread[0]


def schedules_of(fn, args, **settings):
    return [t.schedule for t in lamina.compile(fn, args, **settings).compilation.tiles]


def test_a_product_that_another_kernel_also_reads_is_not_recomputed_in_the_softmax():
    def scores_and_probabilities(q, k):
        s = q @ k.transpose(-1, -2)
        return s, torch.softmax(s, -1)

    assert schedules_of(scores_and_probabilities, (torch.randn(2, 9, 8), torch.randn(2, 11, 8))) == [
        "contraction", "row_reduction"]


def test_rows_longer_than_a_cluster_holds_stay_a_contraction_and_a_softmax():
    args = (torch.randn(1, 5, 8), torch.randn(1, MAX_CLUSTER_ROW_LENGTH + 1, 8))
    assert schedules_of(scores, args) == ["contraction", "row_reduction"]


def test_rows_longer_than_a_block_holds_are_spread_over_a_cluster():
    _, kernel, _, _ = fused_kernel("scores_300_columns_in_a_cluster")
    tile = SCHEDULE.schedule(kernel, SM_90, {})
    notes = dict(tile.knobs)
    assert notes["row"].startswith("300 columns across a cluster of 2 blocks, 256 columns each")
    assert notes["row_reductions"].endswith("then the cluster's blocks' parts through distributed shared memory")
    printed = tile_ir.format_tile_kernel(tile)
    assert "  grid (2, " in printed and "warp_shuffle, 32 splits, across a cluster of 2 blocks along x" in printed
    lowered = SCHEDULE.lower(tile, SM_90)
    assert lowered.launch.cluster == (2, 1, 1) and lowered.launch.grid[0] == 2
    barriers = [s for s in kernel_ir.statements(lowered.body) if isinstance(s, kernel_ir.ClusterBarrier)]
    assert len(barriers) == 3, "one per reduce loop of the softmax, and one before the blocks finish"
    assert "lamina_cluster_load(" in emit_cuda(lowered) and "__cluster_dims__(2, 1, 1)" in emit_cuda(lowered)


def test_a_softmax_across_the_rows_of_the_product_is_not_fused():
    def column_softmax(q, k):
        return torch.softmax(q @ k.transpose(-1, -2), -2)

    assert "contraction_rows" not in schedules_of(column_softmax, (torch.randn(2, 9, 8), torch.randn(2, 11, 8)))


def test_pinning_a_block_that_cannot_hold_the_row_keeps_the_kernels_apart():
    args = (torch.randn(2, 9, 8), torch.randn(2, 40, 8))
    assert schedules_of(scores, args, knobs={"block_n": 32}) == ["contraction", "row_reduction"]


def test_the_schedule_names_a_pinned_knob_that_the_row_fixes():
    _, kernel, _, _ = fused_kernel("scores_130_columns")
    with pytest.raises(ScheduleError, match=r"knob thread_n = 4 cannot apply: a block holds whole rows of 130, so thread_n = 8"):
        SCHEDULE.schedule(kernel, SM_90, {"thread_n": 4})


GPU_RUNS = {
    **PROGRAMS,
    "tinyllama_causal_scores_128": (masked_scores, lambda: (torch.randn(1, 32, 128, 64), torch.randn(1, 32, 128, 64),
                                                            causal_mask(128))),
    "qwen_scores_128": (scores, lambda: (torch.randn(1, 28, 128, 128), torch.randn(1, 28, 128, 128))),
    "qwen_scores_300_by_250": (scores, lambda: (torch.randn(1, 28, 300, 128), torch.randn(1, 28, 250, 128))),
    "qwen_scores_1024_in_clusters_of_4": (scores, lambda: (torch.randn(1, 4, 1024, 128), torch.randn(1, 4, 1024, 128))),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", GPU_RUNS)
def test_matches_pytorch_on_the_gpu(name):
    fn, inputs = GPU_RUNS[name]
    args = tuple(t.cuda() for t in inputs())
    program = lamina.compile(fn, args)
    assert [t.schedule for t in program.compilation.tiles] == ["contraction_rows"]
    out = program(*args)
    assert relative_error(out, float64_reference(fn, args)) < 1e-5

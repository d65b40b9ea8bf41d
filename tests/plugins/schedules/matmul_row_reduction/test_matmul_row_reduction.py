"""Softmax over a contraction's rows in one kernel: fusion, Tile IR, every setting on the simulator, NVRTC.

Each program runs with its products on wgmma, as the schedule chooses on Hopper where they can
run there, and on the CUDA cores (``products = fma``), as it chooses elsewhere."""

import functools
import math

import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.backends.cuda.codegen import emit_cuda
from lamina.backends.cuda.nvrtc import compile_kernel
from lamina.backends.cuda.targets import SM90 as SM_90
from lamina.backends.cuda.wgmma import kernel_arch
from lamina.backends.reference.simulator import simulate
from lamina.bench.measure import float64_reference, relative_error
from lamina.core.errors import ScheduleError
from lamina.core.ir import expr as ex, kernel_ir, loop_ir, tile_ir
from lamina.frontends.torch import capture
from lamina.plugins.schedules.matmul_row_reduction.plugin import MatmulRowReductionSchedule
from lamina.plugins.schedules.matmul_row_reduction.recognise import analyse
from lamina.plugins.schedules.matmul_row_reduction.tiling import (
    MAX_CLUSTER_ROW_LENGTH,
    MAX_FUSED_WGMMA_ROW_LENGTH,
    MAX_LAST_BLOCK_ROW_LENGTH,
    MAX_ROW_LENGTH,
    MAX_WGMMA_ROW_LENGTH,
    ROW_COMBINE_KNOB,
    settings,
)

from ..nvrtc_in_background import start_compiling

SCHEDULE = MatmulRowReductionSchedule()


def pinned(knobs):
    """The schedule's ``knobs`` as pins of a compile: for it, and, but for ``row_combine``, which is its
    own, for the contraction that takes the product where it leaves the product and softmax apart."""
    return {"matmul_row_reduction": dict(knobs),
            "contraction": {name: value for name, value in knobs.items() if name != ROW_COMBINE_KNOB}}


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
    "causal_scores_500_in_a_cluster": (masked_scores, lambda: (torch.randn(1, 500, 4), torch.randn(1, 500, 4),
                                                                causal_mask(500))),
    "log_softmax_300_in_a_cluster": (log_probabilities, lambda: (torch.randn(1, 2, 40, 8), torch.randn(1, 2, 300, 8))),
    "normalised_rows_300_in_a_cluster": (normalised_rows, lambda: (torch.randn(1, 40, 8), torch.randn(1, 300, 8))),
    "classifier_10_classes": (classifier, lambda: (torch.randn(21, 32), torch.randn(10, 32), torch.randn(10))),
}
PRODUCTS = {"wgmma": {}, "cuda_cores": {"products": "fma"}}
"""The knobs that put the products on wgmma (as chosen) and on the CUDA cores."""


@functools.cache
def exported(name):
    """The program's function, captured once with its inputs: export is the slowest step of a
    compile, and each program is compiled under several settings."""
    fn, inputs = PROGRAMS[name] if name in PROGRAMS else BANDS[name]
    args = inputs()
    return fn, capture(fn, args, keep=lamina.Compiler().keep), args


@functools.cache
def _fused(name, knobs):
    fn, captured, args = exported(name)
    program = lamina.Compiler(knobs=pinned(dict(knobs))).compile_captured(captured, args)
    (kernel,) = program.compilation.loop.kernels
    names = [b.name for b in program.compilation.loop.inputs]
    return program, kernel, dict(zip(names, args)), fn


def fused_kernel(name, knobs=None):
    """The program compiled once per setting of ``knobs``: its specialisation, its one Loop IR
    kernel, its inputs by name and its function."""
    return _fused(name, tuple(sorted((knobs or {}).items())))


def simulated(kernel, loop_kernel, inputs):
    arrays = {name: t.reshape(-1).clone() for name, t in inputs.items()}
    (out,) = loop_kernel.outputs
    arrays[out.name] = torch.full((math.prod(out.type.shape),), float("nan"))
    report = simulate(kernel, arrays, raise_on_fault=True)
    return arrays[out.name].reshape(out.type.shape), report


@pytest.mark.parametrize("products", PRODUCTS)
@pytest.mark.parametrize("name", PROGRAMS)
def test_the_product_and_its_softmax_are_one_kernel_that_matches_pytorch(name, products):
    program, _, inputs, fn = fused_kernel(name, PRODUCTS[products])
    assert [t.schedule for t in program.compilation.tiles] == ["matmul_row_reduction"]
    assert [t.settings.products for t in program.compilation.tiles] == [None if products == "cuda_cores" else
                                                                   "wgmma 3xtf32"]
    assert program.compilation.loop.temporaries == ()
    (out,) = program(tuple(inputs.values()), torch.device("cpu"))
    assert relative_error(out, float64_reference(fn, tuple(inputs.values()))) < 1e-5


def test_a_product_wgmma_cannot_read_stays_on_the_cuda_cores():
    """wgmma reads its operands 16 bytes at a time along the reduction: 30 features are not."""
    args = (torch.randn(21, 30), torch.randn(10, 30), torch.randn(10))
    program = lamina.compile(classifier, args)
    assert [(t.schedule, t.settings.products) for t in program.compilation.tiles] == [("matmul_row_reduction", None)]
    assert relative_error(program(*args), float64_reference(classifier, args)) < 1e-5


SWEPT_ON_WGMMA = ("scores_37_columns", "causal_scores_45", "scores_300_columns_in_a_cluster",
                  "log_softmax_300_in_a_cluster", "classifier_10_classes")
"""The programs whose every wgmma setting runs on the simulator: ragged rows and columns in one
block and in a cluster, a mask, two kinds of row reduction and a bias. Every wgmma setting is
one of four blocks, whatever the program; each other program runs its chosen one above."""
SETTINGS = []
for _name in PROGRAMS:
    for _products, _knobs in PRODUCTS.items():
        if _products == "wgmma" and _name not in SWEPT_ON_WGMMA:
            continue
        _, _kernel, _, _ = fused_kernel(_name, _knobs)
        SETTINGS += [(_name, _knobs, choices) for choices in settings(analyse(_kernel), SM_90, _knobs)]


def _id(name, c):
    return (f"{name}-{c.block_m}x{c.block_n}x{c.block_k}-t{c.thread_m}x{c.thread_n}-b{c.buffers}-f{c.fragment_width}"
            f"-{c.products}")


def test_the_settings_stay_few_enough_to_run_each():
    assert len(SETTINGS) < 50


@pytest.mark.parametrize("name, knobs, choices", SETTINGS, ids=[_id(n, c) for n, _, c in SETTINGS])
def test_every_setting_matches_pytorch_without_faults_or_bank_conflicts_and_compiles_without_spills(name, knobs,
                                                                                                   choices):
    _, loop_kernel, inputs, fn = fused_kernel(name, knobs)
    knobs = {**knobs, "block_m": choices.block_m, "block_n": choices.block_n, "thread_m": choices.thread_m,
             "block_k": choices.block_k, "buffers": choices.buffers, "fragment_width": choices.fragment_width}
    tile = SCHEDULE.schedule(loop_kernel, SM_90, knobs)
    assert f"block {choices.block_m}x{choices.block_n}x{choices.block_k}" in dict(tile.knobs)["chosen"]
    kernel = SCHEDULE.lower(tile, SM_90)
    compiling = start_compiling(kernel, kernel_arch(kernel, "sm_90"))
    out, report = simulated(kernel, loop_kernel, inputs)
    assert relative_error(out, float64_reference(fn, tuple(inputs.values()))) < 1e-5
    assert (report.races, report.out_of_bounds, report.unwritten_reads, report.misaligned) == ([], [], [], [])
    assert report.total_bank_conflicts == 0, report.bank_conflicts
    compiled = compiling.result()
    assert (compiled.spill_stores, compiled.spill_loads) == (0, 0)


@pytest.mark.parametrize("heads, d", [(32, 64), (28, 128)], ids=["tinyllama", "qwen"])
@pytest.mark.parametrize("fn", [scores, masked_scores], ids=["plain", "causal"])
def test_the_suites_scores_at_128_tokens_compile_without_spills(heads, d, fn):
    args = (torch.randn(1, heads, 128, d), torch.randn(1, heads, 128, d))
    program = lamina.compile(fn, args + ((causal_mask(128),) if fn is masked_scores else ()))
    assert [t.schedule for t in program.compilation.tiles] == ["matmul_row_reduction"]
    (kernel,) = program.compilation.kernels.kernels
    assert [t.settings.products for t in program.compilation.tiles] == ["wgmma 3xtf32"]
    compiled = compile_kernel(program.compilation.sources[kernel.name], kernel.name, kernel_arch(kernel, "sm_90"))
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
tile softmax  schedule=matmul_row_reduction
  grid (1, 1, 2) blocks of 128 threads, 65536 B shared
  parallel i1 (12): block.y tile 64 = thread.y 32 x 2 per thread (strided by 32)
  parallel i0 (2): block.z tile 1 = thread.z 1 x 1 per thread (contiguous)
  reduce r0 * r1 (12): warp_shuffle, 4 splits
  shared q[i0, i1, r4] as f32[i1 64][r4 32, 128-byte swizzle], 3 buffers, copy cp.async 16 B
  shared k[i0, i2, r4] as f32[i2 64][r4 32, 128-byte swizzle], 3 buffers, copy cp.async 16 B
  products on tensor cores: wgmma m64n64k8 on tf32, each warpgroup 64 rows, each f32 operand as big + small tf32: \
the rows' read from swizzled shared memory into registers and split there, the columns' split in place in swizzled \
shared memory once a k-tile lands; 3 wgmma per product summed over each k-tile, then added in f32
  row = 12 columns across 4 lanes of a warp: 4 lanes x 16 per lane (runs of 2, 8 apart)
  product = bmm3 = sum over r4 (8) in k-tiles of 32 on wgmma, the threads holding its accumulators, computed once \
per element and kept in registers
  element = where(mask[i1, i2], -inf, bmm3 * 0.3535533905932738), computed once per element in place of bmm3
  row_reductions = acc0 max, acc1 sum, each lane's part combined by warp shuffles
  register_tile = 2x16
  chosen = block 64x64x32, thread 2x16, in-block k-splits 1, buffers 3, fragment width 1, padding 0, on tensor cores through \
wgmma; cheapest of 4 settings spanning the row, pinned: none
  estimate = 3.1 us from launch 2.0, compute 1.1 and memory 0.2, overlapped; 2 blocks, 3 per SM at once
  copy q[i0, i1, r4] = r4 fastest across threads, 4 elements per copy
  copy k[i0, i2, r4] = r4 fastest across threads, 4 elements per copy"""

CAUSAL_TILE_IR_ON_CUDA_CORES = """\
tile softmax  schedule=matmul_row_reduction
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
  chosen = block 16x32x8, thread 2x1, in-block k-splits 1, buffers 1, fragment width 1; cheapest of 3 settings spanning the \
row, pinned: products=fma
  estimate = 2.2 us from launch 2.0, compute 0.2 and memory 0.1, overlapped; 2 blocks, 6 per SM at once
  copy q[i0, i1, r4] = r4 fastest across threads
  copy k[i0, i2, r4] = r4 fastest across threads, a warp's i2 8 apart"""


@pytest.mark.parametrize("knobs, golden", [({}, CAUSAL_TILE_IR), ({"products": "fma"}, CAUSAL_TILE_IR_ON_CUDA_CORES)],
                         ids=["wgmma", "cuda_cores"])
def test_causal_scores_loop_ir_and_tile_ir_golden(knobs, golden):
    args = (torch.randn(2, 12, 8), torch.randn(2, 12, 8), causal_mask(12))
    program = lamina.compile(masked_scores, args, knobs=pinned(knobs))
    (kernel,) = program.compilation.loop.kernels
    assert loop_ir.format_kernel(kernel) == CAUSAL_LOOP_IR
    assert tile_ir.format_tile_kernel(program.compilation.tiles[0]) == golden


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


@pytest.mark.parametrize("knobs, length", [
    ({}, MAX_LAST_BLOCK_ROW_LENGTH + 4),
    ({"products": "fma"}, MAX_CLUSTER_ROW_LENGTH + 1),
    ({"products": "wgmma"}, MAX_WGMMA_ROW_LENGTH + 1),
], ids=["wgmma_as_chosen", "cuda_cores", "wgmma_pinned"])
def test_rows_longer_than_one_kernel_holds_stay_a_contraction_and_a_softmax(knobs, length):
    args = (torch.randn(1, 5, 8), torch.randn(1, length, 8))
    assert schedules_of(scores, args, knobs=pinned(knobs)) == ["contraction", "row_reduction"]


def test_the_schedule_says_why_it_leaves_rows_longer_than_a_cluster_of_8_wgmma_blocks_apart():
    args = (torch.randn(1, 5, 8), torch.randn(1, MAX_FUSED_WGMMA_ROW_LENGTH + 1, 8))
    (kernel,) = lamina.compile(scores, args, knobs=pinned({"products": "wgmma"})).compilation.loop.kernels
    with pytest.raises(ScheduleError, match=r"rows of 1025 are longer than the 1024 columns that a cluster of 8 wgmma "
                                            r"blocks holds, .* pin products = wgmma to hold rows of up to 2048"):
        SCHEDULE.schedule(kernel, SM_90, {})


def test_pinning_wgmma_holds_the_longest_rows_in_a_cluster_of_16_blocks():
    args = (torch.randn(1, 5, 8), torch.randn(1, MAX_WGMMA_ROW_LENGTH, 8))
    program = lamina.compile(scores, args, knobs=pinned({"products": "wgmma"}))
    (loop_kernel,) = program.compilation.loop.kernels
    (kernel,) = program.compilation.kernels.kernels
    assert kernel.launch.cluster == (16, 1, 1)
    assert "__cluster_dims__(16, 1, 1)" in program.compilation.sources[kernel.name]
    out, report = simulated(kernel, loop_kernel, dict(zip([b.name for b in loop_kernel.inputs], args)))
    assert relative_error(out, float64_reference(scores, args)) < 1e-5
    assert (report.races, report.out_of_bounds, report.unwritten_reads, report.misaligned) == ([], [], [], [])


@pytest.mark.parametrize("knobs, row, blocks, lanes", [
    ({"products": "fma"}, "300 columns across a cluster of 2 blocks, 256 columns each: 32 lanes x 8 per lane", 2, 32),
    ({}, "300 columns across a cluster of 5 blocks, 64 columns each: 4 lanes x 16 per lane", 5, 4),
], ids=["cuda_cores", "wgmma"])
def test_rows_longer_than_a_block_holds_are_spread_over_a_cluster(knobs, row, blocks, lanes):
    _, kernel, _, _ = fused_kernel("scores_300_columns_in_a_cluster", knobs)
    tile = SCHEDULE.schedule(kernel, SM_90, knobs)
    notes = dict(tile.knobs)
    assert notes["row"].startswith(row)
    assert notes["row_reductions"].endswith("then the cluster's blocks' parts through distributed shared memory")
    printed = tile_ir.format_tile_kernel(tile)
    assert f"  grid ({blocks}, " in printed
    assert f"warp_shuffle, {lanes} splits, across a cluster of {blocks} blocks along x" in printed
    lowered = SCHEDULE.lower(tile, SM_90)
    assert lowered.launch.cluster == (blocks, 1, 1) and lowered.launch.grid[0] == blocks
    barriers = [s for s in kernel_ir.statements(lowered.body) if isinstance(s, kernel_ir.ClusterBarrier)]
    assert len(barriers) == 3, "one per reduce loop of the softmax, and one before the blocks finish"
    source = emit_cuda(lowered)
    assert "lamina_cluster_load(" in source and f"__cluster_dims__({blocks}, 1, 1)" in source


def test_a_softmax_across_the_rows_of_the_product_is_not_fused():
    def column_softmax(q, k):
        return torch.softmax(q @ k.transpose(-1, -2), -2)

    assert "matmul_row_reduction" not in schedules_of(column_softmax, (torch.randn(2, 9, 8), torch.randn(2, 11, 8)))


def test_pinning_a_block_that_cannot_hold_the_row_keeps_the_kernels_apart():
    args = (torch.randn(2, 9, 8), torch.randn(2, 40, 8))
    assert schedules_of(scores, args, knobs=pinned({"block_n": 32})) == ["contraction", "row_reduction"]


def test_the_schedule_names_the_widths_a_wgmma_block_of_the_row_may_take():
    _, kernel, _, _ = fused_kernel("scores_130_columns")
    with pytest.raises(ScheduleError, match=r"knob block_n = 256 cannot apply: a block holds whole rows of 130, so "
                                            r"block_n = 64 or 128"):
        SCHEDULE.schedule(kernel, SM_90, {"products": "wgmma", "block_n": 256})


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
    "qwen_scores_512_in_clusters": (scores, lambda: (torch.randn(1, 4, 512, 128), torch.randn(1, 4, 512, 128))),
    "tinyllama_causal_scores_1024_in_clusters": (masked_scores, lambda: (torch.randn(1, 4, 1024, 64),
                                                                         torch.randn(1, 4, 1024, 64),
                                                                         causal_mask(1024))),
}
GPU_PRODUCTS = {**PRODUCTS, "wgmma_clusters_of_16": {"products": "wgmma"}}


@pytest.mark.gpu
@pytest.mark.parametrize("products", GPU_PRODUCTS)
@pytest.mark.parametrize("name", GPU_RUNS)
def test_matches_pytorch_on_the_gpu(name, products):
    fn, inputs = GPU_RUNS[name]
    args = tuple(t.cuda() for t in inputs())
    program = lamina.compile(fn, args, knobs=pinned(GPU_PRODUCTS[products]))
    assert [t.schedule for t in program.compilation.tiles] == ["matmul_row_reduction"]
    out = program(*args)
    assert relative_error(out, float64_reference(fn, args)) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("fn", [scores, masked_scores], ids=["plain", "causal"])
def test_rows_of_2048_in_clusters_of_16_match_pytorch_on_the_gpu(fn):
    args = (torch.randn(1, 4, 2048, 128, device="cuda"), torch.randn(1, 4, 2048, 128, device="cuda"))
    args += (causal_mask(2048).cuda(),) if fn is masked_scores else ()
    program = lamina.compile(fn, args, knobs=pinned({"products": "wgmma"}))
    assert [k.launch.cluster for k in program.compilation.kernels.kernels] == [(16, 1, 1)]
    assert relative_error(program(*args), float64_reference(fn, args)) < 1e-5


def causal_by_position(q, k):
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).triu(1)
    return torch.softmax((q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5).masked_fill(mask, float("-inf")), -1)


BANDS = {name: PROGRAMS[name] for name in ("scores_300_columns_in_a_cluster", "causal_scores_500_in_a_cluster",
                                           "log_softmax_300_in_a_cluster", "normalised_rows_300_in_a_cluster")}
BANDS["causal_by_position_260"] = (causal_by_position, lambda: (torch.randn(1, 2, 260, 8), torch.randn(1, 2, 260, 8)))
"""Programs whose rows span several blocks, each run with the last block along the rows reducing them: the
plain scores in every wgmma block, the others in both blocks of 128 rows (the largest)."""
BAND_SETTINGS = [(name, c) for name in BANDS
                 for c in settings(analyse(fused_kernel(name)[1]), SM_90)
                 if name == "scores_300_columns_in_a_cluster" or c.block_m == 128]


@pytest.mark.parametrize("name, choices", BAND_SETTINGS, ids=[_id(n, c) for n, c in BAND_SETTINGS])
def test_the_last_block_along_the_rows_reduces_its_rows_without_faults(name, choices):
    _, loop_kernel, inputs, fn = fused_kernel(name)
    knobs = {"row_combine": "last_block", "block_m": choices.block_m, "block_n": choices.block_n, "buffers": choices.buffers}
    tile = SCHEDULE.schedule(loop_kernel, SM_90, knobs)
    assert tile.reduction.strategy == "last_block"
    kernel = SCHEDULE.lower(tile, SM_90)
    compiling = start_compiling(kernel, kernel_arch(kernel, "sm_90"))
    (counters,) = [p for p in kernel.params if p.scratch]
    assert counters.numel == kernel.launch.grid[1] * kernel.launch.grid[2]
    out, report = simulated(kernel, loop_kernel, {**inputs, counters.name: torch.zeros(counters.numel,
                                                                                        dtype=torch.int32)})
    assert relative_error(out, float64_reference(fn, tuple(inputs.values()))) < 1e-5
    assert (report.races, report.out_of_bounds, report.unwritten_reads, report.misaligned) == ([], [], [], [])
    assert report.total_bank_conflicts == 0, report.bank_conflicts
    compiled = compiling.result()
    assert (compiled.spill_stores, compiled.spill_loads) == (0, 0)


LAST_BLOCK_TILE_IR = """\
tile softmax  schedule=matmul_row_reduction
  grid (5, 5, 2) blocks of 32 threads, 65536 B shared
  parallel i2 (260): block.y tile 64 = thread.y 32 x 2 per thread (strided by 32)
  parallel i0 * i1 (2): block.z tile 1 = thread.z 1 x 1 per thread (contiguous)
  reduce r0 * r1 (260): last_block, 4 splits, across 5 blocks along x, the rows combined by the last block to finish
  shared q[0, i1, i2, r4] as f32[i2 64][r4 32, 128-byte swizzle], 3 buffers, copy cp.async 16 B
  shared k[0, i1, i3, r4] as f32[i3 64][r4 32, 128-byte swizzle], 3 buffers, copy cp.async 16 B
  products on tensor cores: wgmma m64n64k8 on tf32, each warpgroup 64 rows, each f32 operand as big + small tf32: the rows' read from swizzled shared memory into registers and split there, the columns' split in place in swizzled shared memory once a k-tile lands; 3 wgmma per product summed over each k-tile, then added in f32
  row = 260 columns across 5 blocks, 64 columns each: 4 lanes x 16 per lane (runs of 2, 8 apart)
  product = bmm3 = sum over r4 (8) in k-tiles of 32 on wgmma, the threads holding its accumulators, computed once per element and kept in registers
  element = where(i3 - i2 >= 1, -inf, bmm3 * 0.3535533905932738), computed once per element in place of bmm3
  last_block = each block stores its elements in softmax and counts itself done for its 64 rows; the last of the 5 blocks along those rows to finish reads them back through L2, a warp per row, 32 lanes x 12 per lane (runs of 4, 128 apart)
  row_reductions = acc0 max, acc1 sum, each warp's row combined by warp shuffles; the stores evict-first, over the elements they read
  unneeded_product = a block where i3 - i2 >= 1 at every element runs no k-tile: its elements do not use the sum
  skipped_elements = a block where i3 - i2 >= 1 at every element stores nothing; the last block reads back no run of 4 where i3 - i2 >= 1 at all of them, and holds -inf there instead
  register_tile = 2x16
  chosen = block 64x64x32, thread 2x16, in-block k-splits 1, buffers 3, fragment width 1, padding 0, on tensor cores through wgmma; cheapest of 4 settings spanning the row, pinned: row_combine=last_block
  estimate = 3.9 us from launch 2.0, compute 1.1 and memory 1.4, overlapped; 50 blocks, 3 per SM at once; then 0.3 us for the last blocks to read the elements back and store the results
  copy q[0, i1, i2, r4] = r4 fastest across threads, 4 elements per copy
  copy k[0, i1, i3, r4] = r4 fastest across threads, 4 elements per copy
"""


def test_causal_scores_combined_by_the_last_block_tile_ir_golden():
    _, loop_kernel, _, _ = fused_kernel("causal_by_position_260")
    assert tile_ir.format_tile_kernel(SCHEDULE.schedule(loop_kernel, SM_90, {"row_combine": "last_block"})) + "\n" == LAST_BLOCK_TILE_IR


def test_blocks_above_a_causal_diagonal_neither_compute_nor_store_and_their_runs_are_not_read_back():
    _, loop_kernel, _, _ = fused_kernel("causal_by_position_260")
    tile = SCHEDULE.schedule(loop_kernel, SM_90, {"row_combine": "last_block", "block_m": 64, "block_n": 64})
    assert dict(tile.knobs)["unneeded_product"].startswith("a block where ")
    kernel = SCHEDULE.lower(tile, SM_90)
    body = list(kernel_ir.statements(kernel.body))
    assert any(isinstance(s, kernel_ir.Declare) and s.var.startswith("needed_k_tiles") for s in body)
    stores = [s for s in body if isinstance(s, kernel_ir.VectorStore) and s.cache == "default" and s.dst == "softmax"]
    read_backs = [s for s in body if isinstance(s, kernel_ir.VectorLoad) and s.cache == "l2"]
    held = [s for s in body if isinstance(s, kernel_ir.If) and any(isinstance(t, kernel_ir.VectorLoad) for t in s.then)
            and s.orelse and all(isinstance(t, kernel_ir.Store) and t.value == ex.const(float("-inf")) for t in s.orelse)]
    skipped_blocks = [s for s in body if isinstance(s, kernel_ir.If) and isinstance(s.cond, ex.Op)
                      and s.cond.op == "not"
                      and any(isinstance(t, kernel_ir.VectorStore) for t in kernel_ir.statements(s.then))]
    guarded = [t for s in skipped_blocks for t in kernel_ir.statements(s.then)]
    assert read_backs and len(held) == len(read_backs)
    assert stores and skipped_blocks and all(any(t is store for t in guarded) for store in stores)


def test_rows_too_long_for_a_cluster_of_8_are_reduced_by_the_last_block_along_the_rows():
    args = (torch.randn(1, 70, 8), torch.randn(1, 1100, 8))
    program = lamina.compile(scores, args)
    (tile,) = program.compilation.tiles
    assert (tile.schedule, tile.reduction.strategy, tile.settings.blocks_combined_by_last_block) == ("matmul_row_reduction", "last_block", 18)
    assert relative_error(program(*args), float64_reference(scores, args)) < 1e-5
    source = next(iter(program.compilation.sources.values()))
    assert "atomicAdd(" in source and "__threadfence();" in source and "__ldcg(" in source and "__stcs(" in source


def test_the_estimate_of_scores_combined_by_the_last_block_adds_the_last_blocks_pass_over_them():
    """TinyLlama's scores at S = 2048: 0.54 GB of scores read back and their results stored,
    251.5 us at the H200's 4.27 TB/s, after the product's 303.4 (both measured 504 us)."""
    args = (torch.randn(1, 32, 2048, 64), torch.randn(1, 32, 2048, 64))
    (tile,) = lamina.compile(scores, args).compilation.tiles
    estimate = dict(tile.knobs)["estimate"]
    assert estimate.startswith("554.9 us from launch 2.0")
    assert estimate.endswith("; then 251.5 us for the last blocks to read the elements back and store the results")


def test_causal_scores_too_long_for_a_cluster_of_8_go_combined_by_the_last_block_that_skip_the_masked_elements():
    """The blocks skip the stores above the diagonal and the last block their reads, as
    the product and the softmax apart do."""
    args = (torch.randn(1, 70, 8), torch.randn(1, 1100, 8))
    program = lamina.compile(causal_by_position, args)
    (tile,) = program.compilation.tiles
    assert (tile.schedule, tile.reduction.strategy) == ("matmul_row_reduction", "last_block")
    assert "skipped_elements" in dict(tile.knobs)
    assert relative_error(program(*args), float64_reference(causal_by_position, args)) < 1e-5


def test_pinning_clusters_keeps_rows_too_long_for_a_cluster_of_8_apart():
    args = (torch.randn(1, 70, 8), torch.randn(1, 1100, 8))
    assert schedules_of(scores, args, knobs=pinned({"row_combine": "cluster"})) == ["contraction", "row_reduction"]


@pytest.mark.parametrize("knobs, reason", [
    ({"row_combine": "last_block", "products": "fma"}, "only where the products run on wgmma"),
    ({"row_combine": "bands"}, r"knob row_combine = 'bands' must be cluster \(clusters of blocks hold the rows\)"),
], ids=["cuda_cores", "bad_value"])
def test_the_schedule_says_why_the_last_block_cannot_reduce_the_rows(knobs, reason):
    _, kernel, _, _ = fused_kernel("scores_300_columns_in_a_cluster")
    with pytest.raises(ScheduleError, match=reason):
        SCHEDULE.schedule(kernel, SM_90, knobs)


def test_pinning_the_last_block_on_rows_not_a_multiple_of_4_long_says_why_it_cannot():
    _, kernel, _, _ = fused_kernel("scores_130_columns")
    with pytest.raises(ScheduleError, match="rows of 130 columns are not read back 16 bytes at a time"):
        SCHEDULE.schedule(kernel, SM_90, {"row_combine": "last_block"})


@pytest.mark.gpu
@pytest.mark.parametrize("name", [*BANDS, "tinyllama_causal_scores_1024_in_clusters"])
def test_the_last_block_along_the_rows_matches_pytorch_on_the_gpu(name):
    fn, inputs = {**GPU_RUNS, **BANDS}[name]
    args = tuple(t.cuda() for t in inputs())
    program = lamina.compile(fn, args, knobs=pinned({"row_combine": "last_block"}))
    assert [t.reduction.strategy for t in program.compilation.tiles] == ["last_block"]
    for _ in range(2):
        assert relative_error(program(*args), float64_reference(fn, args)) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("heads, d", [(32, 64), (28, 128)], ids=["tinyllama", "qwen"])
@pytest.mark.parametrize("fn", [scores, masked_scores], ids=["plain", "causal_mask_tensor"])
def test_both_models_scores_at_2048_are_one_kernel_combined_by_the_last_block_that_matches_pytorch_on_the_gpu(heads, d, fn):
    args = (torch.randn(1, heads, 2048, d, device="cuda"), torch.randn(1, heads, 2048, d, device="cuda"))
    args += (causal_mask(2048).cuda(),) if fn is masked_scores else ()
    program = lamina.compile(fn, args)
    assert [t.reduction.strategy for t in program.compilation.tiles] == ["last_block"]
    for _ in range(2):
        assert relative_error(program(*args), float64_reference(fn, args)) < 1e-5

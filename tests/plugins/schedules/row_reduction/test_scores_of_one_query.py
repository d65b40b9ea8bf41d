"""Attention scores of one query: the softmax over one key needs no reduction of its own,
so the dot products and the softmax are one row-reduction kernel over the features."""

import functools

import pytest
import torch

import lamina
from lamina.backends.cuda.codegen import emit_cuda, kernel_symbol
from lamina.backends.cuda.nvrtc import compile_kernel
from lamina.bench.measure import float64_reference, relative_error
from lamina.core.ir import loop_ir, tile_ir

from .test_nvrtc import assert_no_spills

SCALE = 0.088

LOOP_IR = """\
loop_program(q: {dtype}[1, 28, 1, 128], k: {dtype}[1, 28, 1, 128]) -> (softmax: {dtype}[1, 28, 1, 1]):
  kernel softmax(q: {dtype}[1, 28, 1, 128], k: {dtype}[1, 28, 1, 128]) -> (softmax: {dtype}[1, 28, 1, 1]):
    for i1 in parallel(28):
      acc0: f32 = 0.0
      for r0 in reduce(128):
        acc0 += {product}
      softmax[0, i1, 0, 0] = {value}"""

FP32_LOOP_IR = LOOP_IR.format(
    dtype="f32", product="q[0, i1, 0, r0] * k[0, i1, 0, r0]",
    value="exp(acc0 * 0.088 - acc0 * 0.088) / exp(acc0 * 0.088 - acc0 * 0.088)")

TILE_IR = """\
tile softmax  schedule=row_reduction
  grid (28, 1, 1) blocks of 32 threads
  parallel i1 (28): block.x tile 1 = thread.y 1 x 1 per thread (contiguous)
  reduce r0 (128): warp_shuffle, 32 splits
  vector width {width}
  threads = 32
  rows_per_block = 1
  elements_per_thread = {width}
  row_in_registers = False
  vector_loads = q[0, i1, 0, column], k[0, i1, 0, column]"""


def scores(q, k):
    return torch.softmax(q @ k.transpose(-1, -2) * SCALE, -1)


@functools.cache
def specialize(dtype):
    """The scores compiled once per dtype, for every test that reads them."""
    generator = torch.Generator().manual_seed(0)
    inputs = tuple(torch.randn(1, 28, 1, 128, generator=generator).to(dtype) for _ in range(2))
    return lamina.Compiler().specialize(scores, inputs), inputs


def test_the_scores_of_one_query_are_one_kernel_that_reduces_over_the_features():
    specialization, _ = specialize(torch.float32)
    assert loop_ir.format_program(specialization.compilation.loop) == FP32_LOOP_IR


@pytest.mark.parametrize("dtype, width", [(torch.float32, 4), (torch.bfloat16, 8)], ids=["fp32", "bf16"])
def test_a_warp_per_row_reads_the_features_as_vectors(dtype, width):
    specialization, _ = specialize(dtype)
    (tile,) = specialization.compilation.tiles
    assert tile_ir.format_tile_kernel(tile) == TILE_IR.format(width=width)


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-6), (torch.bfloat16, 1e-2)], ids=["fp32", "bf16"])
def test_the_simulated_kernel_matches_pytorch(dtype, tolerance):
    specialization, inputs = specialize(dtype)
    (got,) = specialization(inputs, torch.device("cpu"))
    assert got.dtype == dtype
    assert relative_error(got, float64_reference(scores, inputs)) < tolerance


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_the_kernel_compiles_without_spills(dtype):
    specialization, _ = specialize(dtype)
    (kernel,) = specialization.compilation.kernels.kernels
    assert_no_spills(compile_kernel(emit_cuda(kernel), kernel_symbol(kernel), "sm_90"))

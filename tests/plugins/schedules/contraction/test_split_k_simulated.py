"""Split-K programs end to end on the Kernel IR simulator (which stops at any race, out-of-bounds
access or unwritten read), against PyTorch in float64, and through NVRTC."""

import functools

import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.backends.cuda.nvrtc import compile_kernel
from lamina.bench.measure import float64_reference, relative_error


def matmul(a, b):
    return torch.matmul(a, b)


def linear_bias(x, w, b):
    return F.linear(x, w, b)


def linear_residual(x, w, r):
    return F.linear(x, w) + r


def gated(x, w, v):
    return F.silu(F.linear(x, w)) * F.linear(x, v)


def batched(a, b):
    return torch.bmm(a, b)


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


CASES = {
    "matmul": (matmul, lambda: (randn(5, 96), randn(96, 24)), 3, 1e-5),
    "linear_bias": (linear_bias, lambda: (randn(5, 96), randn(24, 96), randn(24)), 3, 1e-5),
    "linear_bias_ragged_columns": (linear_bias, lambda: (randn(7, 64), randn(21, 64), randn(21)), 2, 1e-5),
    "linear_residual": (linear_residual, lambda: (randn(5, 96), randn(24, 96), randn(5, 24)), 3, 1e-5),
    "gated_silu_times_up": (gated, lambda: (randn(3, 64), randn(20, 64), randn(20, 64)), 4, 1e-5),
    "batched": (batched, lambda: (randn(2, 5, 64), randn(2, 64, 12)), 2, 1e-5),
    "linear_bias_slices_of_3_and_2_k_tiles": (linear_bias, lambda: (randn(5, 80), randn(24, 80), randn(24)), 2, 1e-5),
    "matmul_ragged_slices_of_2_2_2_and_1_k_tiles": (matmul, lambda: (randn(7, 112), randn(112, 21)), 4, 1e-5),
    "gated_silu_times_up_unequal_slices": (gated, lambda: (randn(3, 80), randn(20, 80), randn(20, 80)), 3, 1e-5),
    "batched_unequal_slices": (batched, lambda: (randn(2, 5, 80), randn(2, 80, 12)), 3, 1e-5),
    "linear_bias_bf16": (
        linear_bias,
        lambda: tuple(randn(*s, dtype=torch.bfloat16) for s in ((5, 96), (24, 96), (24,))),
        3,
        1e-2,
    ),
}


@functools.cache
def compiled_case(name):
    """The case compiled once, for the simulator's test and NVRTC's."""
    fn, make_inputs, splits, tolerance = CASES[name]
    torch.manual_seed(0)
    inputs = make_inputs()
    return fn, inputs, lamina.compile(fn, inputs, knobs={"contraction.split_k": splits}), tolerance


@pytest.mark.parametrize("name", list(CASES))
def test_split_program_matches_pytorch_on_the_simulator(name):
    fn, inputs, compiled, tolerance = compiled_case(name)
    schedules = {t.kernel.name: t.schedule for t in compiled.compilation.tiles}
    partials = [name for name in schedules if name.endswith("_partials")]
    assert partials and all(schedules[name] == "contraction" for name in partials)
    assert set(schedules[name] for name in schedules if name not in partials) == {"unrolled_reduction"}
    out = compiled(*inputs)
    assert out.dtype == fn(*inputs).dtype
    assert relative_error(out, float64_reference(fn, inputs)) < tolerance


@pytest.mark.parametrize("name", list(CASES))
def test_every_split_kernel_compiles_for_sm_90_without_spills(name):
    _, _, compiled, _ = compiled_case(name)
    for kernel in compiled.compilation.kernels.kernels:
        result = compile_kernel(compiled.compilation.sources[kernel.name], kernel.name, "sm_90")
        assert result.registers > 0
        assert (result.spill_stores, result.spill_loads) == (0, 0), kernel.name


def test_the_largest_combine_compiles_without_spills():
    """32 partial sums per output, the most the rule makes, in 16-byte vectors."""
    x, w, b = randn(4, 512), randn(64, 512), randn(64)
    source = lamina.compile(linear_bias, (x, w, b), knobs={"contraction.split_k": 32}).compilation.sources["linear"]
    result = compile_kernel(source, "linear", "sm_90")
    assert (result.spill_stores, result.spill_loads) == (0, 0)
    assert source.count("uint4*>(&linear_partials[") == 32


OUTER_REDUCTIONS = {
    "sum_of_rows": (lambda x: x.sum(0), (6, 40)),
    "max_of_ragged_rows": (lambda x: torch.amax(x, 0) * 2, (7, 37)),
    "mean_over_a_middle_axis": (lambda x: x.mean(1), (3, 5, 24)),
    "max_pooling_of_ragged_images": (lambda x: F.max_pool2d(torch.relu(x), 2, ceil_mode=True), (2, 3, 13, 11)),
}


@pytest.mark.parametrize("name", list(OUTER_REDUCTIONS))
def test_short_outer_reductions_are_unrolled_and_match_pytorch(name):
    fn, shape = OUTER_REDUCTIONS[name]
    torch.manual_seed(0)
    x = torch.randn(*shape)
    compiled = lamina.compile(fn, (x,))
    assert [t.schedule for t in compiled.compilation.tiles] == ["unrolled_reduction"]
    assert relative_error(compiled(x), float64_reference(fn, (x,))) < 1e-6
    (kernel,) = compiled.compilation.kernels.kernels
    result = compile_kernel(compiled.compilation.sources[kernel.name], kernel.name, "sm_90")
    assert (result.spill_stores, result.spill_loads) == (0, 0)


def test_a_long_outer_reduction_is_left_to_the_other_schedules():
    x = torch.randn(33, 8)
    compiled = lamina.compile(lambda x: x.sum(0), (x,))
    assert [t.schedule for t in compiled.compilation.tiles] == ["generic"]

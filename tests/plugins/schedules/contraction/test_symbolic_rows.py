"""Contractions whose rows (and batches) are counted only at run time, such as a prompt's
projections: the cost model weighs the settings at the sizes' hints, the kernel takes the
sizes by value, and it runs at any size, 1 and sizes that are no multiple of a tile included."""

import math

import pytest
import torch

from lamina.backends.cuda.targets import SM80 as SM_80
from lamina.backends.reference.simulator import simulate
from lamina.core.errors import SymbolicSizeError
from lamina.core.ir import dtypes, expr as ex, kernel_ir, sizes
from lamina.plugins.schedules.contraction import ContractionSchedule
from lamina.runtime.program_runner import torch_dtype

from ..contraction_kernels import F32, SM_90, Case, contraction, load
from ..nvrtc_in_background import start_compiling

SCHEDULE = ContractionSchedule()
S0, S1 = sizes.symbol(0), sizes.symbol(1)
RUN_AT = (1, 70, 130)
"""Rows at which each kernel runs: one, and sizes that are no multiple of any block."""


def linear(rows, k: int, n: int, dtype=dtypes.bfloat16) -> Case:
    """``x @ w.T + bias`` of 16-bit ``x`` (rows, k), ``w`` and ``bias``, summed and stored in float32."""
    value = ex.op("mul", ex.cast(load("x", "i0", "r0", dtype=dtype), F32), ex.cast(load("w", "i1", "r0", dtype=dtype), F32))
    store = ex.op("add", ex.Var("acc0", F32), ex.cast(load("bias", "i1", dtype=dtype), F32))
    kernel = contraction("linear", {"x": (rows, k), "w": (n, k), "bias": (n,)}, [("i0", rows), ("i1", n)],
                         ("r0", k), value, ("out", (rows, n)), store, input_dtype=dtype)
    return Case("linear", kernel, lambda x, w, bias: x.float() @ w.float().T + bias.float())


def batched(batch, rows, k: int, n: int) -> Case:
    """``a @ b`` per batch, float32, with the batch and the rows known only at run time."""
    kernel = contraction("bmm", {"a": (batch, rows, k), "b": (batch, k, n)}, [("i0", batch), ("i1", rows), ("i2", n)],
                         ("r0", k), ex.op("mul", load("a", "i0", "i1", "r0"), load("b", "i0", "r0", "i2")),
                         ("out", (batch, rows, n)))
    return Case("bmm", kernel, lambda a, b: a @ b)


def run_at(case: Case, kernel: kernel_ir.Kernel, values: dict[str, int]) -> None:
    """``kernel`` on the simulator at ``values``: no fault, and the product eager computes."""
    torch.manual_seed(sum(values.values()))
    inputs = {b.name: torch.randn(sizes.evaluate_shape(b.type.shape, values), dtype=torch_dtype(b.type.dtype))
              for b in case.kernel.inputs}
    arrays = {name: t.reshape(-1).clone() for name, t in inputs.items()}
    (out,) = case.kernel.outputs
    shape = sizes.evaluate_shape(out.type.shape, values)
    arrays[out.name] = torch.full((math.prod(shape),), float("nan"), dtype=torch_dtype(out.type.dtype))
    report = simulate(kernel_ir.with_sizes(kernel, values), arrays, raise_on_fault=True)
    assert report.faults == []
    torch.testing.assert_close(arrays[out.name].reshape(shape), case.reference(*inputs.values()),
                               rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("hint, products", [(200, "wgmma 16-bit tma"), (3, None)],
                         ids=["a_prompt_on_the_tma_gemm", "a_few_rows_on_the_cuda_cores"])
def test_a_16_bit_linear_of_rows_known_at_run_time_runs_at_every_size(hint, products):
    case = linear(S0, 136, 72)
    with sizes.hinted({"s0": hint}):
        tile = SCHEDULE.schedule(case.kernel, SM_90, {})
    assert tile.settings.products == products
    assert f"weighed at s0 = {hint}" in dict(tile.knobs)["chosen"]
    kernel = SCHEDULE.lower(tile, SM_90)
    compiling = start_compiling(kernel, "sm_90a")
    assert kernel.sizes == ("s0",) and sizes.is_symbolic(kernel.launch.grid[1])
    for rows in RUN_AT:
        run_at(case, kernel, {"s0": rows})
    compiled = compiling.result()
    assert (compiled.spill_stores, compiled.spill_loads) == (0, 0)


def test_the_tma_gemm_encodes_its_maps_with_the_rows_of_each_call():
    with sizes.hinted({"s0": 200}):
        kernel = SCHEDULE.lower(SCHEDULE.schedule(linear(S0, 136, 72).kernel, SM_90, {}), SM_90)
    x_map = next(m for m in kernel.tensor_maps if m.param == "x")
    assert x_map.shape == (S0, 136)
    printed = kernel_ir.format_kernel(kernel).splitlines()
    assert "  tensor map x_map: x[s0][136] (rows 136 apart) in boxes of [128][64], 128-byte swizzle" in printed
    assert "  tensor map out_map: out[s0][72] (rows 72 apart) in boxes of [128][32], 128-byte swizzle" in printed
    assert kernel_ir.with_sizes(kernel, {"s0": 9}).tensor_maps[0].shape == (9, 136)


def test_a_batched_product_of_batches_and_rows_known_at_run_time_runs_at_every_size():
    case = batched(S0, S1, 24, 40)
    with sizes.hinted({"s0": 4, "s1": 50}):
        kernel = SCHEDULE.lower(SCHEDULE.schedule(case.kernel, SM_80, {}), SM_80)
    assert kernel.sizes == ("s0", "s1")
    for batch, rows in ((1, 1), (3, 37), (2, 130)):
        run_at(case, kernel, {"s0": batch, "s1": rows})


@pytest.mark.parametrize("role, shapes", [("columns", (70, S0)), ("reduction", (S0, 72))])
def test_columns_or_a_reduction_known_only_at_run_time_pass_the_kernel_on(role, shapes):
    k, n = shapes
    value = ex.op("mul", load("x", "i0", "r0"), load("w", "i1", "r0"))
    kernel = contraction("linear", {"x": (70, k), "w": (n, k)}, [("i0", 70), ("i1", n)], ("r0", k), value,
                         ("out", (70, n)))
    with sizes.hinted({"s0": 64}), pytest.raises(SymbolicSizeError, match=f"its {role} .* must be a number"):
        SCHEDULE.schedule(kernel, SM_90, {})

"""Contractions whose sizes are counted only at run time, such as a prompt's projections (its
rows) and its attention's products (their columns and reduction too): the cost model weighs the
settings at the sizes' hints, the kernel takes the sizes by value, and it runs at any size, 1
and sizes that are no multiple of a tile included."""

import math

import pytest
import torch

from lamina.backends.cuda.targets import SM80 as SM_80
from lamina.backends.reference.simulator import simulate
from lamina.core.errors import InputMismatchError
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


def scores(batch, queries, keys, depth: int) -> Case:
    """Attention's scores ``q @ k^T`` per head: a prompt's queries and keys both counted at run time
    (the columns and, for the values' product, the reduction)."""
    kernel = contraction("scores", {"q": (batch, queries, depth), "k": (batch, keys, depth)},
                         [("i0", batch), ("i1", queries), ("i2", keys)], ("r0", depth),
                         ex.op("mul", load("q", "i0", "i1", "r0"), load("k", "i0", "i2", "r0")),
                         ("out", (batch, queries, keys)))
    return Case("scores", kernel, lambda q, k: q @ k.transpose(-1, -2))


def weighted_values(batch, queries, keys, features: int) -> Case:
    kernel = contraction("values", {"p": (batch, queries, keys), "v": (batch, keys, features)},
                         [("i0", batch), ("i1", queries), ("i2", features)], ("r0", keys),
                         ex.op("mul", load("p", "i0", "i1", "r0"), load("v", "i0", "r0", "i2")),
                         ("out", (batch, queries, features)))
    return Case("values", kernel, lambda p, v: p @ v)


@pytest.mark.parametrize("target", [SM_80, SM_90], ids=["sm_80", "sm_90"])
@pytest.mark.parametrize("make", [scores, weighted_values], ids=["columns", "reduction"])
def test_columns_and_a_reduction_known_only_at_run_time_run_at_every_size(make, target):
    case = make(4, S0, S0, 16)
    with sizes.hinted({"s0": 100}):
        kernel = SCHEDULE.lower(SCHEDULE.schedule(case.kernel, target, {}), target)
    assert kernel.sizes == ("s0",)
    for length in RUN_AT:
        run_at(case, kernel, {"s0": length})


@pytest.mark.gpu
def test_a_prompts_projection_of_any_length_runs_on_the_gpu():
    """A bf16 linear compiled once for every row count (weighed at 512 rows: the TMA GEMM) and run
    at counts that are no multiple of its blocks, and at far more rows than its example."""
    import torch.nn.functional as F

    import lamina

    torch.manual_seed(0)
    w = torch.randn(1024, 2048, dtype=torch.bfloat16, device="cuda") / 32
    bias = torch.randn(1024, dtype=torch.bfloat16, device="cuda")
    rows = torch.export.Dim("rows", min=2, max=16384)
    example = torch.randn(512, 2048, dtype=torch.bfloat16, device="cuda")
    compiled = lamina.compile(F.linear, (example, w, bias), dynamic_shapes=({0: rows}, None, None))
    assert "wgmma 16-bit tma" in {t.settings.products for t in compiled.compilation.tiles
                                  if t.schedule == "contraction"}
    for count in (2, 70, 512, 3000):
        x = torch.randn(count, 2048, dtype=torch.bfloat16, device="cuda")
        torch.testing.assert_close(compiled(x, w, bias), F.linear(x, w, bias), rtol=2e-2, atol=2e-2)
    assert len(compiled.specializations) == 1


def test_rows_past_what_the_grid_can_launch_are_refused_at_the_call():
    """A size that would need more blocks along y than CUDA launches is an error that says so, never
    a launch that leaves rows out."""
    with sizes.hinted({"s0": 200}):
        kernel = SCHEDULE.lower(SCHEDULE.schedule(linear(S0, 136, 72).kernel, SM_90, {}), SM_90)
    columns = kernel_ir.launch_grid(kernel, {"s0": 128})[0]  # the block columns do not move with s0
    assert kernel_ir.launch_grid(kernel, {"s0": 65535 * 128}) == (columns, 65535, 1)
    with pytest.raises(InputMismatchError, match=r"kernel linear needs 65536 blocks along y at s0 = 8388481, "
                                                 r"more than the 65535 CUDA launches"):
        kernel_ir.with_sizes(kernel, {"s0": 65535 * 128 + 1})

"""A linear layer applied to a batch of sequences: every entry of the batch reads the same weights,
so the blocks run down the block rows of all the entries as one column of rows
(``arrangement.batch_as_rows``), and a wave of blocks shares the weights' k-tiles in L2 whatever
their entry; a product whose B is each entry's own (``bmm``) keeps the batch outermost. On the
Hopper GEMM and on the kernels whose threads stage the operands (float32 on the CUDA cores, on
mma.sync and on wgmma)."""

import pytest
import torch

import lamina
from lamina.bench.measure import relative_error

from ..nvrtc_in_background import start_compiling

PINS = {"products": "wgmma_tma", "block_m": 64, "block_n": 64}


def linear_residual(x, w, r):
    return torch.nn.functional.linear(x, w) + r


def batched_product(a, b):
    return a @ b


def tiles(compiled):
    return [t for t in compiled.compilation.tiles if t.schedule == "contraction"]


@pytest.mark.parametrize("grouped_rows", [2, 4, 7], ids=["within_an_entry", "across_entries", "taller_than_the_grid"])
def test_the_batchs_block_rows_run_as_one_column_and_match_float64_on_the_simulator(grouped_rows):
    """Three entries of 70 rows (two block rows each, the second ragged): groups of rows that end
    inside an entry, cross from one entry into the next, or hold every row of the batch."""
    torch.manual_seed(grouped_rows)
    x, w, r = (torch.randn(3, 70, 96, dtype=torch.bfloat16), torch.randn(300, 96, dtype=torch.bfloat16),
               torch.randn(3, 70, 300, dtype=torch.bfloat16))
    compiled = lamina.compile(linear_residual, (x, w, r), target="sm_90",
                              knobs={"contraction": {**PINS, "grouped_rows": grouped_rows}})
    (tile,) = tiles(compiled)
    assert tile.settings.batch_rows == 3
    assert (f"blocks run down groups of {grouped_rows} grid rows, column by column, the block rows of the batch's 3 "
            "entries (which read the same B) one after another as one column") in compiled.ir("tile")
    reference = linear_residual(x.double(), w.double(), r.double())
    assert relative_error(compiled(x, w, r), reference) <= 1.25 * relative_error(linear_residual(x, w, r),
                                                                                  reference) + 1e-3


@pytest.mark.parametrize("target, knobs", [
    ("sm_80", {"grouped_rows": 3}),
    ("sm_80", {"products": "mma_sync", "grouped_rows": 4}),
    ("sm_90", {"products": "wgmma", "grouped_rows": 4}),
], ids=["cuda_cores", "mma_sync", "wgmma_split_tf32"])
def test_float32_kernels_run_the_batchs_block_rows_as_one_column_and_match_float64(target, knobs):
    torch.manual_seed(3)
    x, w, r = torch.randn(3, 70, 96), torch.randn(300, 96), torch.randn(3, 70, 300)
    compiled = lamina.compile(linear_residual, (x, w, r), target=target, knobs={"contraction": knobs})
    (tile,) = tiles(compiled)
    assert tile.settings.batch_rows == 3 and "entries (which read the same B)" in compiled.ir("tile")
    assert relative_error(compiled(x, w, r), linear_residual(x.double(), w.double(), r.double())) < 1e-6


def test_a_product_whose_b_is_each_entrys_own_keeps_the_batch_outermost():
    torch.manual_seed(5)
    a, b = torch.randn(3, 70, 96, dtype=torch.bfloat16), torch.randn(3, 96, 200, dtype=torch.bfloat16)
    compiled = lamina.compile(batched_product, (a, b), target="sm_90",
                              knobs={"contraction": {**PINS, "grouped_rows": 2}})
    assert [t.settings.batch_rows for t in tiles(compiled) if hasattr(t.settings, "batch_rows")] == [1]
    assert "entries (which read the same B)" not in compiled.ir("tile")
    reference = batched_product(a.double(), b.double())
    assert relative_error(compiled(a, b), reference) <= 1.25 * relative_error(batched_product(a, b), reference) + 1e-3


def test_an_lm_head_over_a_batch_of_sequences_groups_the_rows_of_every_sequence():
    """Eight sequences of 128 tokens through an LM head of 32 000 words: one block row per sequence,
    and the cost model's groups of rows span the sequences (else each sequence's blocks would
    read the whole weight matrix in turn)."""
    x, w = torch.empty(8, 128, 1024, dtype=torch.bfloat16), torch.empty(32000, 1024, dtype=torch.bfloat16)
    compiled = lamina.compile(torch.nn.functional.linear, (x, w), target="sm_90")
    (tile,) = tiles(compiled)
    assert tile.grid_shape()["z"] == 8 and tile.settings.grouped_rows > 1 and tile.settings.batch_rows == 8
    assert "(8 entries of the batch)" in dict(tile.knobs)["block_order"]


def test_the_batchs_rows_as_one_column_compile_for_sm_90a_without_spills():
    x, w = torch.empty(8, 128, 1024, dtype=torch.bfloat16), torch.empty(32000, 1024, dtype=torch.bfloat16)
    compiled = lamina.compile(torch.nn.functional.linear, (x, w), target="sm_90")
    (kernel,) = [k for k, t in zip(compiled.compilation.kernels.kernels, compiled.compilation.tiles)
                 if t.schedule == "contraction"]
    built = start_compiling(kernel, "sm_90a").result()
    assert built.registers > 0 and (built.spill_stores, built.spill_loads) == (0, 0)


def test_a_batch_counted_only_at_run_time_keeps_the_batch_outermost():
    """The grid's rows are not known when the batch is a size of each call: each entry is grouped
    alone, as the Tile IR says."""
    from lamina.core.ir import dtypes, expr as ex, sizes
    from lamina.plugins.schedules.contraction import ContractionSchedule

    from ..contraction_kernels import F32, SM_90, contraction, load

    def batched_linear(batch):
        bf16 = dtypes.bfloat16
        value = ex.op("mul", ex.cast(load("x", "i0", "i1", "r0", dtype=bf16), F32),
                      ex.cast(load("w", "i2", "r0", dtype=bf16), F32))
        return contraction("linear", {"x": (batch, 128, 2048), "w": (32000, 2048)},
                           [("i0", batch), ("i1", 128), ("i2", 32000)], ("r0", 2048), value, ("out", (batch, 128, 32000)),
                           input_dtype=bf16)

    with sizes.hinted({"s0": 8}):
        known, counted = (ContractionSchedule().schedule(batched_linear(b), SM_90, {}) for b in (8, sizes.symbol(0)))
    assert (known.settings.batch_rows, counted.settings.batch_rows) == (8, 1)
    assert "(8 entries of the batch)" not in dict(counted.knobs)["block_order"]


@pytest.mark.gpu
@pytest.mark.parametrize("grouped_rows", [2, 4, 7], ids=["within_an_entry", "across_entries", "taller_than_the_grid"])
def test_the_batchs_block_rows_as_one_column_match_float64_on_the_gpu(grouped_rows):
    torch.manual_seed(grouped_rows)
    x, w, r = (torch.randn(3, 200, 512, dtype=torch.bfloat16, device="cuda"),
               torch.randn(1000, 512, dtype=torch.bfloat16, device="cuda"),
               torch.randn(3, 200, 1000, dtype=torch.bfloat16, device="cuda"))
    compiled = lamina.compile(linear_residual, (x, w, r),
                              knobs={"contraction": {"products": "wgmma_tma", "grouped_rows": grouped_rows}})
    (tile,) = tiles(compiled)
    assert tile.settings.batch_rows == 3
    reference = linear_residual(x.double(), w.double(), r.double())
    assert relative_error(compiled(x, w, r), reference) <= 1.25 * relative_error(linear_residual(x, w, r),
                                                                                  reference) + 1e-3


@pytest.mark.gpu
def test_an_lm_head_over_a_batch_of_sequences_matches_float64_on_the_gpu():
    torch.manual_seed(11)
    x = torch.randn(8, 128, 1024, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(32000, 1024, dtype=torch.bfloat16, device="cuda") / 32
    compiled = lamina.compile(torch.nn.functional.linear, (x, w))
    (tile,) = tiles(compiled)
    assert tile.settings.batch_rows == 8
    reference = torch.nn.functional.linear(x.double(), w.double())
    assert relative_error(compiled(x, w), reference) <= 1.25 * relative_error(torch.nn.functional.linear(x, w),
                                                                              reference) + 1e-3


@pytest.mark.gpu
@pytest.mark.parametrize("knobs", [{"products": "mma_sync", "grouped_rows": 4}, {"products": "wgmma", "grouped_rows": 4}],
                         ids=["mma_sync", "wgmma_split_tf32"])
def test_float32_kernels_run_the_batchs_block_rows_as_one_column_on_the_gpu(knobs):
    torch.manual_seed(3)
    x, w, r = (torch.randn(3, 200, 256, device="cuda"), torch.randn(600, 256, device="cuda"),
               torch.randn(3, 200, 600, device="cuda"))
    compiled = lamina.compile(linear_residual, (x, w, r), knobs={"contraction": knobs})
    (tile,) = tiles(compiled)
    assert tile.settings.batch_rows == 3
    assert relative_error(compiled(x, w, r), linear_residual(x.double(), w.double(), r.double())) < 1e-5

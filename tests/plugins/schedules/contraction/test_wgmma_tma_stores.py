"""Outputs of the Hopper GEMM stored by the TMA from a shared tile (``wgmma_tma/tma_stores.py``): the
tile's two layouts on ragged shapes on the simulator, the kernels through NVRTC without the
serialised wgmma that ptxas warns of, the planted faults the simulator catches, and where the
outputs stay in registers."""

import attrs
import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.backends.cuda.codegen import emit_cuda, kernel_symbol
from lamina.backends.cuda.nvrtc import compile_kernel
from lamina.bench.measure import float64_reference, relative_error
from lamina.core.errors import SimulationError
from lamina.core.ir import kernel_ir, tile_ir
from lamina.plugins.schedules.contraction.wgmma_tma import tma_stores

from ..contraction_kernels import rewritten
from .test_wgmma_tma import SERIALISED_WGMMA, pins


def linear(x, w):
    return x @ w.t()


def linear_gelu(x, w, bias):
    return F.gelu(F.linear(x, w, bias))


def _compiled(program, args, knobs):
    compiled = lamina.compile(program, args, knobs={"contraction": knobs})
    tiles = [t for t in compiled.compilation.tiles if t.schedule == "contraction"]
    kernels = [k for k in compiled.compilation.kernels.kernels if k.tensor_maps]
    return compiled, tiles, kernels


@pytest.mark.parametrize("shape, knobs, layout", [
    ((130, 136, 200), pins(128, 176, 2, 2), tma_stores.PLAIN),
    ((130, 72, 400), pins(128, 192, 2, 2), tma_stores.SWIZZLED),
    ((70, 136, 136), pins(128, 64, 2, 2), tma_stores.SWIZZLED),
], ids=["plain_rows_176", "three_panels_the_last_past_the_edge", "one_panel"])
def test_a_bf16_linear_stored_by_the_tma_matches_float64_on_ragged_shapes(shape, knobs, layout):
    """M, N and K that no tile divides: the TMA writes only what lies inside the output, and a panel
    that starts past the output's last column is not stored at all (400 columns in blocks of 192)."""
    m, k, n = shape
    torch.manual_seed(0)
    x, w = torch.randn(m, k, dtype=torch.bfloat16), torch.randn(n, k, dtype=torch.bfloat16)
    compiled, (tile,), (kernel,) = _compiled(linear, (x, w), knobs)
    assert tile.settings.staged_output_copy == "tma"
    assert tma_stores.layout(2, tile.grid[0].block_tile) == layout
    stores = [s for s in kernel_ir.statements(kernel.body) if isinstance(s, kernel_ir.TmaStore)]
    assert len(stores) == (1 if layout == tma_stores.PLAIN else knobs["block_n"] // 64)
    reference = float64_reference(linear, (x, w))
    assert relative_error(compiled(x, w), reference) <= 1.25 * relative_error(linear(x, w), reference)
    built = compile_kernel(emit_cuda(kernel), kernel_symbol(kernel), "sm_90a")
    assert (built.spill_stores, built.spill_loads) == (0, 0)
    assert SERIALISED_WGMMA not in built.log


def test_float32_outputs_go_through_a_plain_tile_of_8_byte_pairs():
    """A product cast to float32 in its epilogue: pairs of 8 bytes, 176 columns in plain rows."""
    def program(x, w):
        return (x @ w.t()).float()

    torch.manual_seed(3)
    x, w = torch.randn(130, 136, dtype=torch.bfloat16), torch.randn(200, 136, dtype=torch.bfloat16)
    compiled, (tile,), (kernel,) = _compiled(program, (x, w), pins(128, 176, 2, 2))
    assert tile.settings.staged_output_copy == "tma" and tma_stores.layout(4, 176) == tma_stores.PLAIN
    torch.testing.assert_close(compiled(x, w), program(x, w), rtol=1.6e-2, atol=1e-2)
    assert SERIALISED_WGMMA not in compile_kernel(emit_cuda(kernel), kernel_symbol(kernel), "sm_90a").log


def test_an_epilogue_with_a_bias_and_gelu_goes_through_the_tile():
    torch.manual_seed(1)
    x, w, bias = (torch.randn(130, 72, dtype=torch.bfloat16), torch.randn(200, 72, dtype=torch.bfloat16),
                  torch.randn(200, dtype=torch.bfloat16))
    compiled, (tile,), (kernel,) = _compiled(linear_gelu, (x, w, bias), pins(128, 176, 2, 2))
    assert tile.settings.staged_output_copy == "tma"
    reference = float64_reference(linear_gelu, (x, w, bias))
    assert relative_error(compiled(x, w, bias), reference) <= 1.25 * relative_error(linear_gelu(x, w, bias), reference)
    assert SERIALISED_WGMMA not in compile_kernel(emit_cuda(kernel), kernel_symbol(kernel), "sm_90a").log


def test_a_residual_read_before_the_products_keeps_the_stores_in_registers():
    """Reads held in registers through the products and the tile's stores together make ptxas
    serialise the wgmma, so such a block stores from its registers."""
    torch.manual_seed(2)
    x, w, r = (torch.randn(130, 136, dtype=torch.bfloat16), torch.randn(72, 136, dtype=torch.bfloat16),
               torch.randn(130, 72, dtype=torch.bfloat16))
    compiled, (tile,), (kernel,) = _compiled(lambda x, w, r: r + x @ w.t(), (x, w, r), pins(128, 64, 2, 2))
    assert tile.settings.early_read_registers > 0 and tile.settings.staged_output_copy == ""
    assert not any(isinstance(s, kernel_ir.TmaStore) for s in kernel_ir.statements(kernel.body))
    torch.testing.assert_close(compiled(x, w, r), r + x @ w.t(), rtol=1.6e-2, atol=1e-2)


def test_rows_the_tma_cannot_address_keep_the_stores_in_registers():
    """250 bf16 columns: rows 500 bytes apart, not a multiple of 16, which a tensor map needs."""
    x, w = torch.randn(130, 72, dtype=torch.bfloat16), torch.randn(250, 72, dtype=torch.bfloat16)
    _, (tile,), _ = _compiled(linear, (x, w), pins(128, 128, 2, 2))
    assert tile.settings.staged_output_copy == "" and tile.settings.staged_output_bytes == 0


def test_a_block_of_one_consumer_warpgroup_stores_from_its_registers():
    """Timed, the TMA's tile paid only in blocks of two consumer warpgroups
    (``experiments/tma_stores_by_warpgroups/``)."""
    x, w = torch.randn(130, 136, dtype=torch.bfloat16), torch.randn(200, 136, dtype=torch.bfloat16)
    _, (tile,), (kernel,) = _compiled(linear, (x, w), pins(128, 64, 2, 1))
    assert tile.settings.staged_output_copy == ""
    assert not any(isinstance(s, kernel_ir.TmaStore) for s in kernel_ir.statements(kernel.body))


def test_a_plain_tile_is_taken_only_where_a_warps_rows_share_banks_at_most_two_to_one():
    assert tma_stores.layout(2, 176) == tma_stores.PLAIN
    assert tma_stores.layout(2, 192) == tma_stores.SWIZZLED
    assert tma_stores.layout(2, 160) is None  # rows 320 bytes apart: four of a warp's rows to a bank
    assert tma_stores.layout(4, 96) == tma_stores.SWIZZLED  # float32 panels are 32 columns


def test_the_tile_ir_says_how_the_outputs_go_out():
    x, w = torch.randn(130, 136, dtype=torch.bfloat16), torch.randn(200, 136, dtype=torch.bfloat16)
    _, (tile,), _ = _compiled(linear, (x, w), pins(128, 176, 2, 2))
    printed = tile_ir.format_tile_kernel(tile)
    assert ("outputs stored by the TMA: the consumers put the epilogue's values in a shared tile (plain rows), then "
            "one thread copies it out in 1 TMA store") in printed
    assert "epilogue_stores = 2 adjacent outputs per store (4 B) into a shared tile, which the TMA copies out" in printed


def _planted(change):
    x, w = torch.randn(70, 136, dtype=torch.bfloat16), torch.randn(136, 136, dtype=torch.bfloat16)
    compiled, _, (kernel,) = _compiled(linear, (x, w), pins(128, 64, 2, 2))
    return attrs.evolve(kernel, body=rewritten(kernel.body, change)), x, w


def _simulate(kernel, x, w):
    from lamina.backends.reference.simulator import simulate

    inputs = iter((x, w))
    arrays = {p.name: torch.zeros(p.numel, dtype=torch.bfloat16) if p.writable else next(inputs).reshape(-1).clone()
              for p in kernel.params}
    return simulate(kernel, arrays, raise_on_fault=True)


def test_a_tile_stored_without_the_async_proxy_fence_is_a_fault_the_simulator_reports():
    kernel, x, w = _planted(lambda s: [] if isinstance(s, kernel_ir.AsyncProxyFence) else [s])
    with pytest.raises(SimulationError, match="AsyncProxyFence"):
        _simulate(kernel, x, w)


def test_a_kernel_that_ends_before_its_tma_store_has_read_the_tile_is_a_fault_the_simulator_reports():
    kernel, x, w = _planted(lambda s: [] if isinstance(s, kernel_ir.TmaStoreWait) else [s])
    with pytest.raises(SimulationError, match="TmaStoreWait"):
        _simulate(kernel, x, w)


def test_the_cost_model_takes_a_width_that_fills_the_last_wave_where_the_tma_stores_the_outputs():
    """TinyLlama's gate at 512 rows: 176 columns make 128 blocks for the 132 SMs, the fastest setting
    timed (``experiments/gemm_mainloop/``); widths between multiples of 32 are weighed only for blocks
    whose outputs the TMA stores, the only ones timed (5 630 columns: rows the TMA cannot address)."""
    x, w = torch.randn(512, 2048, dtype=torch.bfloat16), torch.randn(5632, 2048, dtype=torch.bfloat16)
    (tile,) = lamina.compile(linear, (x, w), target="sm_90").compilation.tiles
    assert dict(tile.knobs)["chosen"].startswith("block 128x176x64, 4 stages, 2 consumer warpgroups")
    assert tile.settings.staged_output_copy == "tma"
    (tile,) = lamina.compile(linear, (x, w[:5630].clone()), target="sm_90").compilation.tiles
    assert tile.settings.staged_output_copy == "" and tile.grid[0].block_tile % 32 == 0


def test_the_cost_model_weighs_no_width_between_multiples_of_32_below_128_columns():
    """BERT's up-projection at 512 rows (3 072 columns, K = 768) took 11.1 us in blocks of 112
    columns and 9.3 in blocks of 128 (``experiments/tma_stores_by_warpgroups/``)."""
    x, w = torch.randn(512, 768, dtype=torch.bfloat16), torch.randn(3072, 768, dtype=torch.bfloat16)
    (tile,) = lamina.compile(linear, (x, w), target="sm_90").compilation.tiles
    assert tile.grid[0].block_tile % 32 == 0
    pinned = lamina.compile(linear, (x, w), target="sm_90", knobs={"contraction": pins(128, 112, 4, 2)})
    assert pinned.compilation.tiles[0].grid[0].block_tile == 112

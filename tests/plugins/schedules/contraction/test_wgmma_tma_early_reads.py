"""The Hopper GEMM's epilogue reads other buffers at its outputs' rows (a residual, a gate)
before the products, into registers, where they fit beside the accumulators; a bias stays in the
epilogue, and reads that do not fit are read after the products (``wgmma_tma.early_reads``)."""

import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.core.ir import tile_ir



def pins(block_m: int, block_n: int, stages: int, groups: int) -> dict:
    return {"products": "wgmma_tma", "block_m": block_m, "block_n": block_n, "stages": stages,
            "consumer_warpgroups": groups}


@pytest.mark.parametrize("n, knobs", [
    (72, pins(64, 64, 3, 1)),
    (73, pins(64, 64, 2, 1)),  # odd rows: the outputs go through the shared tile
    (72, {**pins(64, 64, 2, 1), "tile_scheduler": "persistent"}),
], ids=["pairs", "shared_tile", "persistent"])
def test_the_epilogue_reads_its_residual_and_gate_before_the_products(n, knobs):
    """``residual + silu(gate) * (x @ w.T)``: the residual and the gate, read at each output's row,
    are read into registers before the first k-tile (a bias would stay in the epilogue), and the
    result is eager's on ragged shapes."""
    torch.manual_seed(n)
    x, w = torch.randn(70, 136, dtype=torch.bfloat16), torch.randn(n, 136, dtype=torch.bfloat16)
    gate, residual = torch.randn(70, n, dtype=torch.bfloat16), torch.randn(70, n, dtype=torch.bfloat16)
    bias = torch.randn(n, dtype=torch.bfloat16)

    def program(x, w, gate, residual, bias):
        return residual + F.silu(gate) * (x @ w.T + bias)

    args = (x, w, gate, residual, bias)
    compiled = lamina.compile(program, args, knobs={"contraction": knobs})
    (tile,) = compiled.compilation.tiles
    rows_per_thread = 2 * (knobs["block_m"] // 64)
    early = 2 * rows_per_thread * knobs["block_n"] // 4
    assert tile.settings.early_read_registers == early
    assert f"epilogue reads: issued before the products, into {early} registers a consumer thread" \
        in tile_ir.format_tile_kernel(tile)
    source = compiled.ir("cuda")
    assert source.index("residual_early[0] = ") < source.rindex("for (int kt") and "bias_early" not in source
    torch.testing.assert_close(compiled(*args), program(*args), rtol=1.6e-2, atol=3e-2)


def test_epilogue_reads_that_do_not_fit_beside_the_accumulators_stay_in_the_epilogue():
    """128 x 256 outputs on two warpgroups hold 128 accumulators a thread: a residual's 128 values
    more would not fit, and are read after the products, as the cost model counts them."""
    x, w = torch.randn(512, 256, dtype=torch.bfloat16), torch.randn(512, 256, dtype=torch.bfloat16)
    residual = torch.randn(512, 512, dtype=torch.bfloat16)
    compiled = lamina.compile(lambda x, w, r: r + x @ w.T, (x, w, residual), target="sm_90",
                              knobs={"contraction": {**pins(128, 256, 4, 2), "split_k": 1}})
    (tile,) = compiled.compilation.tiles
    assert tile.settings.early_read_registers == 0
    assert "epilogue reads" not in tile_ir.format_tile_kernel(tile)

"""A gated MLP's gate and up projections summed side by side in one Hopper GEMM (``pair_gated_products``)."""

import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.bench.measure import float64_reference, relative_error
from lamina.core.ir import loop_ir
from lamina.plugins.schedules.contraction.recognise import NotAContraction, analyse

from ..nvrtc_in_background import start_compiling

SERIALISED_WGMMA = "C7514"
ACTIVATIONS = {"silu": F.silu, "gelu": lambda t: F.gelu(t, approximate="tanh")}


def gated(activation):
    def mlp(x, gate, up):
        return activation(x @ gate.T) * (x @ up.T)
    return mlp


def inputs(rows: int, features: int, hidden: int, dtype=torch.bfloat16, seed: int = 0, device="cpu"):
    generator = torch.Generator().manual_seed(seed)
    scale = features ** -0.5
    return tuple((torch.randn(*shape, generator=generator) * s).to(dtype).to(device)
                 for shape, s in (((rows, features), 1.0), ((hidden, features), scale), ((hidden, features), scale)))


def contraction_tiles(compiled):
    return [t for t in compiled.compilation.tiles if t.schedule == "contraction"]


def assert_matches_eager_and_float64(program, out, args):
    eager = program(*args)
    reference = float64_reference(program, args)
    assert relative_error(out, reference) <= 1.25 * relative_error(eager, reference) + 1e-3


@pytest.mark.parametrize("rows, features, hidden", [(130, 96, 200), (64, 64, 72)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("activation", ["silu", "gelu"])
def test_a_gated_mlp_is_one_kernel_summing_both_products_and_matches_eager_on_the_simulator(
        rows, features, hidden, dtype, activation):
    """Ragged rows, reductions and columns (no multiple of the tiles), run on the simulator, which
    reports any race or read out of bounds as an error."""
    program = gated(ACTIVATIONS[activation])
    args = inputs(rows, features, hidden, dtype)
    compiled = lamina.compile(program, args, target="sm_90")
    (tile,) = contraction_tiles(compiled)
    assert tile.settings.products == "wgmma 16-bit tma" and tile.settings.paired
    assert len(compiled.compilation.kernels.kernels) == 1
    assert_matches_eager_and_float64(program, compiled(*args), args)


def halves(x, gate_up):
    """Phi-3's MLP: one product of twice the width, its first half the gate and its second the up projection."""
    gate, up = F.linear(x, gate_up).chunk(2, dim=-1)
    return up * F.silu(gate)


@pytest.mark.parametrize("rows, features, hidden", [(130, 96, 200), (64, 64, 72)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_product_split_into_gate_and_up_is_one_kernel_summing_both_halves_on_the_simulator(
        rows, features, hidden, dtype):
    x, gate, up = inputs(rows, features, hidden, dtype)
    args = (x.unsqueeze(0), torch.cat([gate, up]))
    compiled = lamina.compile(halves, args, target="sm_90")
    (tile,) = contraction_tiles(compiled)
    assert tile.settings.paired and len(compiled.compilation.kernels.kernels) == 1
    assert_matches_eager_and_float64(halves, compiled(*args), args)


def test_a_prompt_of_any_length_runs_the_pair_compiled_once():
    """Rows known only at run time (a prompt's tokens): the pair is weighed at the example's 130 rows
    and runs at 1, 7 and 200 rows, none a multiple of its blocks, on the simulator."""
    x, gate, up = inputs(130, 64, 72)
    rows = torch.export.Dim("rows", min=1, max=4096)
    compiled = lamina.compile(gated(F.silu), (x, gate, up), target="sm_90", dynamic_shapes=({0: rows}, None, None))
    (tile,) = contraction_tiles(compiled)
    assert tile.settings.paired
    for count in (1, 7, 200):
        args = (inputs(count, 64, 72, seed=count)[0], gate, up)
        assert_matches_eager_and_float64(gated(F.silu), compiled(*args), args)
    assert len(compiled.specializations) == 1


def test_the_halves_are_read_a_fixed_number_of_rows_apart_in_one_weight():
    x, gate, up = inputs(128, 64, 96)
    compiled = lamina.compile(halves, (x.unsqueeze(0), torch.cat([gate, up])), target="sm_90")
    (kernel,) = compiled.compilation.loop.kernels
    c = analyse(kernel, joined=True)
    columns = [o.text for o in c.operands if o.side == "n"] + [c.paired.operand.text]
    assert sorted(columns) == ["gate_up[i2 + 96, r0]", "gate_up[i2, r0]"]
    assert "shared gate_up[i2 + 96, r0]" in compiled.ir("tile") and "shared gate_up[i2, r0]" in compiled.ir("tile")


def test_the_loop_ir_sums_both_products_in_one_reduce_loop_and_the_tile_ir_says_so():
    compiled = lamina.compile(gated(F.silu), inputs(128, 64, 96), target="sm_90")
    assert compiled.ir("loop") == """\
loop_program(x: bf16[128, 64], gate: bf16[96, 64], up: bf16[96, 64]) -> (mul: bf16[128, 96]):
  kernel mul(x: bf16[128, 64], gate: bf16[96, 64], up: bf16[96, 64]) -> (mul: bf16[128, 96]):
    for i0 in parallel(128):
      for i1 in parallel(96):
        acc0: f32 = 0.0
        acc1: f32 = 0.0
        for r0 in reduce(64):
          acc0 += f32(x[i0, r0]) * f32(gate[i1, r0])
          acc1 += f32(x[i0, r0]) * f32(up[i1, r0])
        mul[i0, i1] = bf16(f32(bf16(acc0)) * sigmoid(f32(bf16(acc0)))) * bf16(acc1)"""
    tile = compiled.ir("tile")
    block_n = contraction_tiles(compiled)[0].grid[0].block_tile
    assert f"shared up[i1, r0] as bf16[i1 {block_n}][r0 64, 128-byte swizzle]" in tile
    assert f"wgmma m64n{2 * block_n}k16 on bf16" in tile
    assert (f"  two sums side by side: the k-tiles of gate[i1, r0] and up[i1, r0] in one stage, {block_n} rows each, summed by one "
            "wgmma into the accumulators of both; the epilogue reads each output's two sums from the same thread's "
            "registers") in tile.splitlines()


def test_only_the_hopper_gemm_is_given_a_kernel_of_two_sums():
    compiled = lamina.compile(gated(F.silu), inputs(128, 64, 96), target="sm_90")
    (kernel,) = compiled.compilation.loop.kernels
    with pytest.raises(NotAContraction, match="sums two products at once"):
        analyse(kernel)
    c = analyse(kernel, joined=True)
    assert (c.acc, c.paired.acc, c.paired.operand.load.buffer) == ("acc0", "acc1", "up")


def kernels_of(program, args, **options):
    compiled = lamina.compile(program, args, **options)
    return [k.name for k in compiled.compilation.loop.kernels], compiled


@pytest.mark.parametrize("case, args, options", [
    ("float32 products have no TMA GEMM", inputs(128, 64, 96, torch.float32), {"target": "sm_90"}),
    ("a GPU before Hopper", inputs(128, 64, 96), {"target": "sm_80"}),
    ("fewer rows than a wgmma's 64", inputs(16, 64, 96), {"target": "sm_90"}),
    ("other products pinned", inputs(128, 64, 96), {"target": "sm_90", "knobs": {"contraction": {"products": "fma"}}}),
    ("columns pinned wider than half a wgmma", inputs(128, 64, 200),
     {"target": "sm_90", "knobs": {"contraction": {"block_n": 192}}}),
])
def test_the_products_stay_apart_where_the_paired_kernel_cannot_run_or_is_not_asked_for(case, args, options):
    names, compiled = kernels_of(gated(F.silu), args, **options)
    assert len(names) == 2, case
    assert_matches_eager_and_float64(gated(F.silu), compiled(*args), args)


def test_an_up_projection_read_elsewhere_as_well_stays_its_own_kernel():
    def program(x, gate, up):
        upped = x @ up.T
        return F.silu(x @ gate.T) * upped, upped

    args = inputs(128, 64, 96)
    names, compiled = kernels_of(program, args, target="sm_90")
    assert len(names) == 2
    for got, want in zip(compiled(*args), program(*args)):
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)


class GatedMlp(torch.nn.Module):
    """Llama's MLP: down(silu(gate(x)) * up(x))."""

    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_proj = torch.nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = torch.nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = torch.nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def assert_torch_compile_pairs_and_matches_eager(compiled_programs, hidden: int, intermediate: int, tokens: int,
                                                 device: str = "cpu"):
    """A Llama MLP through ``torch.compile(backend="lamina")``, as users call it: its gate and up
    projections one kernel, its result against eager's and float64."""
    mlp = GatedMlp(hidden, intermediate).to(torch.bfloat16).to(device)
    x = torch.randn(1, tokens, hidden, dtype=torch.bfloat16, device=device)
    with torch.no_grad():
        out = torch.compile(mlp, backend="lamina")(x)
        eager = mlp(x)
        reference = mlp.double()(x.double())
    assert relative_error(out, reference) <= 1.25 * relative_error(eager, reference) + 1e-3
    tiles = [t for program in compiled_programs for t in contraction_tiles(program)]
    assert [t.settings.paired for t in tiles] == [True, False]  # the pair, then the down projection


def test_a_llama_mlp_through_torch_compile_matches_eager(compiled_programs):
    torch.manual_seed(3)
    assert_torch_compile_pairs_and_matches_eager(compiled_programs, 64, 176, 80)


def phi3_args():
    x, gate, up = inputs(512, 3072, 8192)
    return x.unsqueeze(0), torch.cat([gate, up])


@pytest.mark.parametrize("program, args", [(gated(F.silu), lambda: inputs(512, 2048, 5632)), (halves, phi3_args)],
                         ids=["tinyllama", "phi3"])
def test_the_models_mlps_compile_for_sm_90a_without_spills_or_serialised_wgmma(program, args):
    """The settings the cost model picks at TinyLlama's shapes (512 tokens, 2048 -> 5632) and Phi-3's
    (3072 -> 8192, its two halves in one weight), through NVRTC."""
    compiled = lamina.compile(program, args(), target="sm_90")
    (tile,) = contraction_tiles(compiled)
    assert tile.settings.paired
    (kernel,) = [k for k in compiled.compilation.kernels.kernels if k.tensor_maps]
    result = start_compiling(kernel, "sm_90a").result()
    assert (result.spill_stores, result.spill_loads) == (0, 0)
    assert SERIALISED_WGMMA not in result.log


def test_blocks_that_divide_the_columns_keep_their_wgmma_unserialised():
    """Blocks of 64 and 128 columns divide TinyLlama's 5 632: an epilogue without a column guard made
    ptxas serialise every wgmma of such a kernel (C7514), so a paired kernel checks its columns always."""
    compiling = []
    for block_m, block_n in [(64, 64), (128, 64), (128, 128)]:
        knobs = {"contraction": {"block_m": block_m, "block_n": block_n}}
        compiled = lamina.compile(gated(F.silu), inputs(512, 2048, 5632), target="sm_90", knobs=knobs)
        (kernel,) = [k for k in compiled.compilation.kernels.kernels if k.tensor_maps]
        compiling.append(start_compiling(kernel, "sm_90a"))
    for future in compiling:
        result = future.result()
        assert SERIALISED_WGMMA not in result.log
        assert (result.spill_stores, result.spill_loads) == (0, 0)


@pytest.mark.gpu
@pytest.mark.parametrize("rows, features, hidden", [(512, 2048, 5632), (333, 200, 520)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_gated_mlp_matches_eager_on_the_gpu(rows, features, hidden, dtype):
    program = gated(F.silu)
    args = inputs(rows, features, hidden, dtype, device="cuda")
    compiled = lamina.compile(program, args)
    assert contraction_tiles(compiled)[0].settings.paired
    assert_matches_eager_and_float64(program, compiled(*args), args)


@pytest.mark.gpu
def test_a_product_split_into_gate_and_up_matches_eager_on_the_gpu():
    x, gate, up = inputs(333, 3072, 8192, device="cuda")
    args = (x.unsqueeze(0), torch.cat([gate, up]))
    compiled = lamina.compile(halves, args)
    assert contraction_tiles(compiled)[0].settings.paired
    assert_matches_eager_and_float64(halves, compiled(*args), args)


@pytest.mark.gpu
def test_a_llama_mlp_through_torch_compile_matches_eager_on_the_gpu(compiled_programs):
    torch.manual_seed(4)
    assert_torch_compile_pairs_and_matches_eager(compiled_programs, 2048, 5632, 300, device="cuda")


def test_loop_kernels_of_one_sum_are_analysed_as_before():
    """A plain linear is not affected: one accumulator, no pair."""
    compiled = lamina.compile(lambda x, w: x @ w.T, inputs(128, 64, 96)[:2], target="sm_90")
    (kernel,) = compiled.compilation.loop.kernels
    assert isinstance(kernel, loop_ir.Kernel) and analyse(kernel).paired is None

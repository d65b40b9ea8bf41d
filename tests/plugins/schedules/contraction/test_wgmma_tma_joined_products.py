"""Products of one input side by side in one Hopper GEMM (``join_products_of_one_input``): a layer's
query, key and value projections."""

import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.bench.measure import float64_reference, relative_error
from lamina.plugins.schedules.contraction.recognise import NotAContraction, analyse

from ..nvrtc_in_background import start_compiling

SERIALISED_WGMMA = "C7514"


def projections(x, wq, wk, wv):
    return x @ wq.T, x @ wk.T, x @ wv.T


def projections_with_bias(x, wq, wk, wv, bq, bk, bv):
    return F.linear(x, wq, bq), F.linear(x, wk, bk), F.linear(x, wv, bv)


def weights(rows: int, features: int, columns: tuple[int, ...], dtype=torch.bfloat16, seed: int = 0,
            device="cpu", bias: bool = False):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, features, generator=generator)
    ws = [torch.randn(n, features, generator=generator) * features ** -0.5 for n in columns]
    bs = [torch.randn(n, generator=generator) for n in columns] if bias else []
    return tuple(t.to(dtype).to(device) for t in (x, *ws, *bs))


def contraction_tiles(compiled):
    return [t for t in compiled.compilation.tiles if t.schedule == "contraction"]


def assert_each_matches_eager_and_float64(program, outs, args):
    eager = program(*args)
    reference = float64_reference(program, args)
    for got, want, exact in zip(outs, eager, reference):
        assert relative_error(got, exact) <= 1.25 * relative_error(want, exact) + 1e-3


@pytest.mark.parametrize("rows, features, columns", [(130, 96, (192, 64, 64)), (64, 64, (64, 128, 64))])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("bias", [False, True])
def test_query_key_and_value_projections_are_one_kernel_and_match_eager_on_the_simulator(
        rows, features, columns, dtype, bias):
    """Ragged rows and reductions (no multiple of the tiles), each product with or without its bias,
    run on the simulator, which reports any race or read out of bounds as an error."""
    program = projections_with_bias if bias else projections
    args = weights(rows, features, columns, dtype, bias=bias)
    compiled = lamina.compile(program, args, target="sm_90")
    (tile,) = contraction_tiles(compiled)
    assert tile.settings.products == "wgmma 16-bit tma" and len(tile.settings.pieces) == 3
    assert len(compiled.compilation.kernels.kernels) == 1
    assert_each_matches_eager_and_float64(program, compiled(*args), args)


def heads(x, wq, wk, wv, bq, bk, bv):
    """BERT's projections: each stored per head, where attention reads it, over a batch of sequences
    of 70 tokens (the rows split into sequence and position)."""
    batch, length = 2, 70

    def split(t, width):
        return t.view(batch, length, -1, width).transpose(1, 2)

    x = x.view(batch, length, -1)
    return split(F.linear(x, wq, bq), 64), split(F.linear(x, wk, bk), 64), split(F.linear(x, wv, bv), 32)


def test_projections_stored_per_head_over_a_batch_of_sequences_match_eager_on_the_simulator():
    args = weights(140, 64, (128, 128, 64), bias=True)
    compiled = lamina.compile(heads, args, target="sm_90")
    (tile,) = contraction_tiles(compiled)
    assert len(tile.settings.pieces) == 3
    assert_each_matches_eager_and_float64(heads, compiled(*args), args)


def test_the_loop_ir_runs_the_products_one_after_the_other_and_the_tile_ir_places_them_side_by_side():
    compiled = lamina.compile(projections, weights(128, 64, (128, 64, 64)), target="sm_90")
    assert compiled.ir("loop") == """\
loop_program(x: bf16[128, 64], wq: bf16[128, 64], wk: bf16[64, 64], wv: bf16[64, 64]) -> (mm: bf16[128, 128], mm_1: bf16[128, 64], mm_2: bf16[128, 64]):
  kernel mm(x: bf16[128, 64], wq: bf16[128, 64], wk: bf16[64, 64], wv: bf16[64, 64]) -> (mm: bf16[128, 128], mm_1: bf16[128, 64], mm_2: bf16[128, 64]):
    for i0 in parallel(128):
      for i1 in parallel(128):
        acc0: f32 = 0.0
        for r0 in reduce(64):
          acc0 += f32(x[i0, r0]) * f32(wq[i1, r0])
        mm[i0, i1] = bf16(acc0)
    for i0 in parallel(128):
      for i1 in parallel(64):
        acc0: f32 = 0.0
        for r0 in reduce(64):
          acc0 += f32(x[i0, r0]) * f32(wk[i1, r0])
        mm_1[i0, i1] = bf16(acc0)
    for i0 in parallel(128):
      for i1 in parallel(64):
        acc0: f32 = 0.0
        for r0 in reduce(64):
          acc0 += f32(x[i0, r0]) * f32(wv[i1, r0])
        mm_2[i0, i1] = bf16(acc0)"""
    lines = compiled.ir("tile").splitlines()
    assert "  parallel i1 (256): block.x tile 64 = thread.x 4 x 16 per thread (grouped by 2, groups 8 apart)" in lines
    at = lines.index("  3 products of one input side by side: a block's columns lie in one, whose weight's k-tiles it "
                     "copies through its own tensor map and whose epilogue it runs")
    assert lines[at + 1:at + 4] == ["    columns 0 to 127: wq[i1, r0], into mm",
                                    "    columns 128 to 191: wk[i1, r0], into mm_1",
                                    "    columns 192 to 255: wv[i1, r0], into mm_2"]


def test_only_the_hopper_gemm_is_given_a_kernel_of_products_side_by_side():
    compiled = lamina.compile(projections, weights(128, 64, (128, 64, 64)), target="sm_90")
    (kernel,) = compiled.compilation.loop.kernels
    with pytest.raises(NotAContraction, match="runs 3 products of one input side by side"):
        analyse(kernel)
    c = analyse(kernel, joined=True)
    assert [(p.first_column, p.columns, p.column_operand.load.buffer) for p in c.pieces] == [
        (0, 128, "wq"), (128, 64, "wk"), (192, 64, "wv")]
    assert c.extents[c.n] == 256


def test_a_prompt_of_any_length_runs_the_joined_kernel_compiled_once():
    """Rows known only at run time (a prompt's tokens): the products are weighed at the example's 130
    rows and run at 1, 7 and 200 rows, none a multiple of the blocks, on the simulator."""
    x, *ws = weights(130, 64, (128, 64, 64))
    rows = torch.export.Dim("rows", min=1, max=4096)
    compiled = lamina.compile(projections, (x, *ws), target="sm_90", dynamic_shapes=({0: rows}, None, None, None))
    (tile,) = contraction_tiles(compiled)
    assert len(tile.settings.pieces) == 3
    for count in (1, 7, 200):
        args = (weights(count, 64, (128, 64, 64), seed=count)[0], *ws)
        assert_each_matches_eager_and_float64(projections, compiled(*args), args)
    assert len(compiled.specializations) == 1


def chained(x, wq, wk, wv):
    """The key projection's weight is computed from the query projection: it cannot run beside it."""
    q = x @ wq.T
    return q, x @ (wk + q[:64, :1]).T, x @ wv.T


@pytest.mark.parametrize("case, program, args, options", [
    ("float32 products have no TMA GEMM", projections, weights(128, 64, (128, 64, 64), torch.float32),
     {"target": "sm_90"}),
    ("a GPU before Hopper", projections, weights(128, 64, (128, 64, 64)), {"target": "sm_80"}),
    ("fewer rows than a wgmma's 64", projections, weights(16, 64, (128, 64, 64)), {"target": "sm_90"}),
    ("other products pinned", projections, weights(128, 64, (128, 64, 64)),
     {"target": "sm_90", "knobs": {"contraction": {"products": "fma"}}}),
    ("columns no multiple of 64", projections, weights(128, 256, (128, 72, 64)), {"target": "sm_90"}),
])
def test_the_products_stay_apart_where_the_joined_kernel_cannot_run_or_is_not_asked_for(case, program, args, options):
    compiled = lamina.compile(program, args, **options)
    if case == "columns no multiple of 64":  # the two others still join
        assert [len(t.settings.pieces) for t in contraction_tiles(compiled)] == [2, 0]
    else:
        assert len(compiled.compilation.loop.kernels) == 3, case
    assert_each_matches_eager_and_float64(program, compiled(*args), args)


def test_a_product_that_reads_what_another_writes_stays_apart():
    args = weights(128, 256, (128, 64, 64))
    compiled = lamina.compile(chained, args, target="sm_90")
    assert [len(t.settings.pieces) for t in contraction_tiles(compiled)] == [2, 0]
    for got, want in zip(compiled(*args), chained(*args)):
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)


def test_tinyllamas_projections_compile_for_sm_90a_without_spills_or_serialised_wgmma():
    """The setting the cost model picks at TinyLlama's shapes (512 tokens, 2048 -> 2048, 256 and 256),
    through NVRTC."""
    compiled = lamina.compile(projections, weights(512, 2048, (2048, 256, 256)), target="sm_90")
    (tile,) = contraction_tiles(compiled)
    assert len(tile.settings.pieces) == 3
    (kernel,) = compiled.compilation.kernels.kernels
    result = start_compiling(kernel, "sm_90a").result()
    assert (result.spill_stores, result.spill_loads) == (0, 0)
    assert SERIALISED_WGMMA not in result.log


@pytest.mark.gpu
@pytest.mark.parametrize("rows, features, columns", [(512, 2048, (2048, 256, 256)), (333, 200, (192, 64, 128))])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_projections_side_by_side_match_eager_on_the_gpu(rows, features, columns, dtype):
    args = weights(rows, features, columns, dtype, device="cuda", bias=True)
    compiled = lamina.compile(projections_with_bias, args)
    assert len(contraction_tiles(compiled)[0].settings.pieces) == 3
    assert_each_matches_eager_and_float64(projections_with_bias, compiled(*args), args)


@pytest.mark.gpu
def test_projections_stored_per_head_match_eager_on_the_gpu():
    args = weights(140, 64, (128, 128, 64), device="cuda", bias=True)
    compiled = lamina.compile(heads, args)
    assert len(contraction_tiles(compiled)[0].settings.pieces) == 3
    assert_each_matches_eager_and_float64(heads, compiled(*args), args)


def test_a_llama_layer_through_torch_compile_joins_its_projections_and_matches_eager(compiled_programs):
    """One Llama layer of grouped key heads (4 query heads of 64 features, 2 key and value heads), as
    users call it: its query, key and value projections one kernel, on the simulator."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(5)
    config = transformers.LlamaConfig(hidden_size=256, num_hidden_layers=1, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=512, vocab_size=128,
                                      max_position_embeddings=128)
    model = transformers.LlamaModel(config).to(torch.bfloat16).eval()
    ids = torch.randint(0, 128, (1, 80))
    with torch.no_grad():
        out = torch.compile(model, backend="lamina")(input_ids=ids).last_hidden_state
        eager = model(input_ids=ids).last_hidden_state
        reference = model.double()(input_ids=ids).last_hidden_state
    assert relative_error(out, reference) <= 1.25 * relative_error(eager, reference) + 1e-3
    pieces = [len(getattr(t.settings, "pieces", ())) for program in compiled_programs for t in contraction_tiles(program)]
    assert pieces.count(3) == 1, pieces


def test_a_wide_product_that_fills_the_gpu_alone_stays_apart():
    """Mistral-7B's projections at 512 tokens: the cost model expected the three joined to take a
    fifth less than apart, and the model ran 5 % slower with them joined; joining takes a larger
    expected gain (``JOINED_SHARE``)."""
    compiled = lamina.compile(projections, weights(512, 4096, (4096, 1024, 1024)), target="sm_90")
    (query,) = [t for t in contraction_tiles(compiled) if "wq" in {b.name for b in t.kernel.inputs}]
    assert query.settings.pieces == ()

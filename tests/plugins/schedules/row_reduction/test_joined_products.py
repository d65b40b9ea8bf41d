"""A decoding step's query, key and value projections: each computing its input's norm itself
(``compute_vector_reduction_in_each_product``), and the three in one launch
(``join_matrix_vector_products``), each a row reduction, one after another in the blocks of one
kernel."""

import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.backends.cuda.codegen import emit_cuda, kernel_symbol
from lamina.backends.cuda.nvrtc import compile_kernel
from lamina.bench.measure import float64_reference, relative_error
from lamina.plugins.schedules.row_reduction.recognise import NotARowReduction, analyse, pieces


def norm_and_projections(x, g, wq, wk, wv, bq):
    """A layer's RMSNorm and its three projections of one token, the query's with a bias (Qwen)."""
    h = x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * g
    return F.linear(h, wq, bq), F.linear(h, wk), F.linear(h, wv)


def projections(x, wq, wk, wv):
    return x @ wq.T, x @ wk.T, x @ wv.T


def tensors(features: int, columns: tuple[int, ...], dtype=torch.bfloat16, rows: int = 1, norm: bool = True,
            device="cpu"):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, features, generator=generator)
    ws = [torch.randn(n, features, generator=generator) * features ** -0.5 for n in columns]
    extra = [torch.randn(features, generator=generator)] if norm else []
    bias = [torch.randn(columns[0], generator=generator)] if norm else []
    return tuple(t.to(dtype).to(device) for t in (x, *extra, *ws, *bias))


def row_tiles(compiled):
    return [t for t in compiled.compilation.tiles if t.schedule == "row_reduction"]


def assert_each_matches_eager_and_float64(program, outs, args):
    eager = program(*args)
    reference = float64_reference(program, args)
    for got, want, exact in zip(outs, eager, reference):
        assert relative_error(got, exact) <= 1.25 * relative_error(want, exact) + 1e-3


@pytest.mark.parametrize("features, columns", [(200, (96, 40, 33)), (64, (7, 130, 64))])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_the_projections_of_one_token_are_one_kernel_and_match_eager_on_the_simulator(features, columns, dtype):
    """Ragged rows and reductions (no multiple of a warp or a vector), run on the simulator, which
    reports any race or read out of bounds as an error."""
    args = tensors(features, columns, dtype)
    compiled = lamina.compile(norm_and_projections, args, target="sm_90")
    (joined,) = row_tiles(compiled)
    assert len(pieces(joined.kernel)) == 3 and len(compiled.compilation.kernels.kernels) == 1
    assert_each_matches_eager_and_float64(norm_and_projections, compiled(*args), args)


@pytest.mark.parametrize("knobs", [{"threads": 64}, {"threads": 32, "rows_per_block": 4},
                                   {"threads": 32, "vector_width": 1}])
def test_pinned_settings_hold_for_every_product_of_the_kernel(knobs):
    """Several rows to a block where no product's rows are a multiple of them: each product's
    blocks check their own last rows."""
    args = tensors(100, (9, 13, 6), norm=False)
    compiled = lamina.compile(projections, args, target="sm_90", knobs={"row_reduction": knobs})
    (joined,) = row_tiles(compiled)
    assert len(pieces(joined.kernel)) == 3
    settings = dict(joined.knobs) | {"vector_width": joined.vector_width}
    assert {k: settings[k] for k in knobs} == knobs
    assert_each_matches_eager_and_float64(projections, compiled(*args), args)


def test_the_tile_ir_says_which_blocks_run_which_product():
    compiled = lamina.compile(projections, tensors(64, (96, 40, 33), norm=False), target="sm_90",
                              knobs={"row_reduction": {"threads": 32, "rows_per_block": 2}})
    (tile,) = compiled.ir("tile").split("\n\n")
    assert tile.splitlines()[:3] == [
        "tile mm  schedule=row_reduction",
        "  grid (85, 1, 1) blocks of 64 threads",
        "  parallel i1 (169): block.x tile 2 = thread.y 2 x 1 per thread (contiguous)",
    ]
    assert tile.splitlines()[-1] == (
        "  pieces = 3 row reductions one after another, a block's rows in one: blocks 0 to 47: 96 rows into mm; "
        "blocks 48 to 67: 40 rows into mm_1; blocks 68 to 84: 33 rows into mm_2")


def test_the_loop_ir_runs_the_products_one_after_the_other_and_no_rule_reads_it_as_one_row_reduction():
    compiled = lamina.compile(projections, tensors(64, (96, 40, 33), norm=False), target="sm_90")
    (kernel,) = compiled.compilation.loop.kernels
    assert [loop.extent for loop in kernel.body] == [96, 40, 33]
    with pytest.raises(NotARowReduction, match="runs 3 nests one after another"):
        analyse(kernel)


def test_each_product_reduces_the_norm_of_its_input_itself():
    compiled = lamina.compile(norm_and_projections, tensors(64, (16, 8, 8)), target="sm_90")
    (kernel,) = compiled.compilation.loop.kernels
    assert compiled.ir("loop").splitlines()[1:10] == [
        "  kernel linear(x: bf16[1, 64], g: bf16[64], wq: bf16[16, 64], bq: bf16[16], wk: bf16[8, 64], "
        "wv: bf16[8, 64]) -> (linear: bf16[1, 16], linear_1: bf16[1, 8], linear_2: bf16[1, 8]):",
        "    for i1 in parallel(16):",
        "      acc0: f32 = 0.0",
        "      for r0 in reduce(64):",
        "        acc0 += pow(f32(x[0, r0]), 2.0)",
        "      acc1: f32 = 0.0",
        "      for r1 in reduce(64):",
        "        acc1 += f32(x[0, r1] * bf16(rsqrt(acc0 / 64.0 + 1e-06)) * g[r1]) * f32(wq[i1, r1])",
        "      linear[0, i1] = bf16(acc1 + f32(bq[i1]))",
    ]
    assert dict(row_tiles(compiled)[0].knobs)["row_in_registers"] is True  # the vector, read by both loops


def norm_also_returned(x, g, wq, wk, wv, bq):
    h = x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * g
    return F.linear(h, wq, bq), F.linear(h, wk), F.linear(h, wv), h * 2


def norm_of_several_rows(x, g, wq, wk, wv, bq):
    """Three tokens: the products are no matrix-vector products, and the norm stays a kernel."""
    return norm_and_projections(x, g, wq, wk, wv, bq)


@pytest.mark.parametrize("program, rows", [(norm_also_returned, 1), (norm_of_several_rows, 3)])
def test_a_norm_that_a_reader_other_than_a_product_reads_stays_a_kernel(program, rows):
    args = tensors(64, (16, 8, 8), rows=rows)
    compiled = lamina.compile(program, args, target="sm_90")
    assert any(t.kernel.name.startswith("mean") for t in compiled.compilation.tiles)
    assert_each_matches_eager_and_float64(program, compiled(*args), args)


def chained(x, wq, wk, wv):
    """The second product reads the first's output: it cannot run beside it."""
    q = x @ wq.T
    return q, (q[:, :64] @ wk.T), x @ wv.T


def two_inputs(x, wq, wk, wv):
    """The second product's vector is another tensor: the first and third join, without it."""
    return x @ wq.T, wv[:1] @ wk.T, x @ wv.T


@pytest.mark.parametrize("program, apart", [(chained, 1), (two_inputs, 1)], ids=["chained", "two_inputs"])
def test_products_that_cannot_run_together_stay_apart(program, apart):
    args = tensors(64, (96, 40, 33), norm=False)
    compiled = lamina.compile(program, args, target="sm_90")
    joined = [t for t in row_tiles(compiled) if len(t.kernel.body) > 1]
    assert [len(pieces(t.kernel)) for t in joined] == [2]
    assert len(row_tiles(compiled)) == 1 + apart
    assert_each_matches_eager_and_float64(program, compiled(*args), args)


def test_products_of_several_rows_are_not_matrix_vector_products():
    compiled = lamina.compile(projections, tensors(64, (96, 40, 33), rows=3, norm=False), target="sm_90")
    assert not row_tiles(compiled) and len(compiled.compilation.loop.kernels) == 3


def test_tinyllamas_projections_of_one_token_compile_without_spills():
    compiled = lamina.compile(norm_and_projections, tensors(2048, (2048, 256, 256)), target="sm_90")
    kernel = next(k for k in compiled.compilation.kernels.kernels if len(k.params) > 4)
    result = compile_kernel(emit_cuda(kernel), kernel_symbol(kernel), "sm_90")
    assert result.registers > 0 and (result.spill_stores, result.spill_loads) == (0, 0)


@pytest.mark.gpu
@pytest.mark.parametrize("columns", [(2048, 256, 256), (3584, 512, 512)], ids=["tinyllama", "qwen2.5-7b"])
def test_the_projections_of_one_token_match_eager_on_the_gpu(columns):
    args = tensors(columns[0], columns, device="cuda")
    compiled = lamina.compile(norm_and_projections, args)
    (joined,) = [t for t in row_tiles(compiled) if len(t.kernel.body) > 1]
    assert len(pieces(joined.kernel)) == 3
    assert_each_matches_eager_and_float64(norm_and_projections, compiled(*args), args)


def norm_and_head(x, g, w):
    """The last norm of a decoding step and its LM head."""
    h = x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(x.dtype) * g
    return F.linear(h, w)


@pytest.mark.parametrize("rows, apart", [(2048, False), (32000, True)])
def test_a_product_of_many_waves_of_rows_leaves_the_norm_a_kernel_of_its_own(rows, apart):
    """Each row computing the norm waits for it before loading its weights: a second pass over
    memory in every wave of blocks. TinyLlama's LM head (32 000 rows, 31 waves on an H100) took
    52.5 us so against 43.2 with the norm apart (``experiments/decode_launches/``)."""
    x, g = torch.randn(1, 2048, dtype=torch.bfloat16), torch.randn(2048, dtype=torch.bfloat16)
    w = torch.empty(rows, 2048, dtype=torch.bfloat16)  # only shapes are compiled here
    compiled = lamina.compile(norm_and_head, (x, g, w), target="sm_90")
    assert len(compiled.compilation.loop.kernels) == (2 if apart else 1)

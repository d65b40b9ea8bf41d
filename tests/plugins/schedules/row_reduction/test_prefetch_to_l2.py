"""A matrix-vector product's first matrix rows prefetched into L2 before each block waits for the
previous kernel (``prefetch_to_l2``): which kernels do it, what the Tile IR, Kernel IR and CUDA
say, and that the results are those of eager on the simulator and on the GPU."""

import pytest
import torch

import lamina
from lamina.backends.cuda.codegen import emit_cuda, kernel_symbol
from lamina.backends.cuda.nvrtc import compile_kernel
from lamina.core.errors import ScheduleError
from lamina.core.ir import kernel_ir as kir
from lamina.plugins.schedules.row_reduction import prefetch
from lamina.plugins.schedules.row_reduction.recognise import pieces

from .test_joined_products import assert_each_matches_eager_and_float64, norm_and_projections, row_tiles, tensors


def rms_norm(x, g):
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * g


def prefetched_before_the_wait(kernel: kir.Kernel) -> list[str]:
    """The arrays the kernel prefetches into L2 before it waits for the previous kernel."""
    arrays = []
    for s in kernel.body:
        if isinstance(s, kir.WaitForPreviousKernel):
            return arrays
        arrays += [t.array for t in kir.statements((s,)) if isinstance(t, kir.PrefetchToL2)]
    raise AssertionError("the kernel does not wait for the previous kernel")


@pytest.mark.parametrize("knobs", [{}, {"threads": 32, "rows_per_block": 4}])
def test_a_decoding_steps_projections_prefetch_their_weights_and_match_eager(knobs):
    """Ragged rows (no multiple of a block's rows), three products in one launch, each block
    prefetching the rows of the product its index falls in; run on the simulator."""
    args = tensors(200, (96, 40, 33))
    compiled = lamina.compile(norm_and_projections, args, target="sm_90", knobs={"row_reduction": knobs})
    (joined,) = row_tiles(compiled)
    assert len(pieces(joined.kernel)) == 3
    described = dict(joined.knobs)["prefetch_to_l2"]
    assert described.startswith("wq[i1, column]: ") and "wk[i1, column]: " in described and \
        described.endswith("into L2 before waiting for the previous kernel, in the first "
                           f"{compiled.compilation.kernels.kernels[0].launch.grid[0]} blocks")
    (kernel,) = compiled.compilation.kernels.kernels
    assert sorted(set(prefetched_before_the_wait(kernel))) == ["wk", "wq", "wv"]
    assert_each_matches_eager_and_float64(norm_and_projections, compiled(*args), args)


def test_pinned_false_or_before_hopper_no_block_prefetches():
    args = tensors(64, (16, 8, 8))
    off = lamina.compile(norm_and_projections, args, target="sm_90",
                         knobs={"row_reduction": {"prefetch_to_l2": False}})
    ampere = lamina.compile(norm_and_projections, args, target="sm_80")
    for compiled in (off, ampere):
        assert "prefetch" not in compiled.ir("kernel")
        assert "prefetch_to_l2" not in compiled.ir("tile")


def test_a_norm_reads_no_matrix_beside_a_vector_and_prefetches_nothing():
    args = (torch.randn(37, 96, dtype=torch.bfloat16), torch.randn(96, dtype=torch.bfloat16))
    assert "prefetch" not in lamina.compile(rms_norm, args, target="sm_90").ir("kernel")
    with pytest.raises(ScheduleError, match="prefetch_to_l2 = true needs a reduction that reads a matrix"):
        lamina.compile(rms_norm, args, target="sm_90", knobs={"row_reduction": {"prefetch_to_l2": True}})


def test_only_the_first_wave_prefetches_within_a_share_of_l2():
    """TinyLlama's LM head at one token: 32 000 rows of 4 KB, more blocks than the SMs hold at once;
    the blocks that can start while the previous kernel runs each prefetch their row, and the
    CUDA source issues the prefetches before ``griddepcontrol.wait`` and compiles."""
    x, w = torch.randn(1, 2048, dtype=torch.bfloat16), torch.randn(32000, 2048, dtype=torch.bfloat16)
    compiled = lamina.compile(lambda x, w: x @ w.T, (x, w), target="sm_90")
    (kernel,) = compiled.compilation.kernels.kernels
    source = emit_cuda(kernel)
    assert f"if ((int)blockIdx.x < {132 * 16}) {{" in source
    assert source.index("prefetch.global.L2") < source.index("griddepcontrol.wait")
    assert compile_kernel(source, kernel_symbol(kernel), "sm_90").spill_stores == 0


def test_the_lines_a_block_prefetches_are_its_rows_within_its_share_of_l2():
    (tile,) = row_tiles(lamina.compile(lambda x, w: x @ w.T, (torch.randn(1, 2048), torch.randn(4096, 2048)),
                                       target="sm_90", knobs={"row_reduction": {"rows_per_block": 4}}))
    (row,) = pieces(tile.kernel)
    assert prefetch.lines_per_row(row, prefetch.matrix_reads(row)[0]) == 2048 * 4 // 128
    assert prefetch.lines_per_block(row, 4, 100, 50 << 20) == 4 * 64  # all of its four rows
    assert prefetch.lines_per_block(row, 4, 1000, 50 << 20) == (50 << 20) // 4 // (1000 * 128)


@pytest.mark.gpu
def test_the_prefetching_projections_match_eager_on_the_gpu():
    args = tensors(2048, (2048, 256, 256), device="cuda")
    compiled = lamina.compile(norm_and_projections, args)
    assert "prefetch_to_l2" in compiled.ir("tile")
    assert_each_matches_eager_and_float64(norm_and_projections, compiled(*args), args)

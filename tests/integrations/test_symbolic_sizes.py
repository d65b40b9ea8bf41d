"""Graphs with sizes known only at run time: ``torch.compile(..., dynamic=True)``, and the sizes
Dynamo makes symbolic when they change between calls, compiled once for every size."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from lamina.api import Compiler
from lamina.backends.cuda.backend import CudaBackend
from lamina.core.errors import InputMismatchError
from lamina.core.ir import sizes


@pytest.fixture
def compiled_programs(monkeypatch):
    """Each program lamina compiles."""
    found = []
    original = Compiler.compile_captured

    def counted(self, captured, example_inputs, started=None):
        specialization = original(self, captured, example_inputs, started)
        found.append(specialization)
        return specialization

    monkeypatch.setattr(Compiler, "compile_captured", counted)
    return found


def scaled_softmax(x, y):
    return torch.softmax(x * 2 + y, dim=-1).sum(0) + 1


def grown(cache, new):
    """A key-value cache that grows by a token: the default cache of ``transformers``."""
    return torch.cat([cache, new], dim=-2) * 0.5


SIZES = [(3, 5), (37, 130), (130, 2), (2, 33)]  # sizes that are no multiple of any tile


def test_a_dynamic_graph_compiles_once_and_runs_at_every_size(compiled_programs):
    f = torch.compile(scaled_softmax, backend="lamina", dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for rows, columns in SIZES:
            x, y = torch.randn(rows, columns), torch.randn(columns)
            torch.testing.assert_close(f(x, y), scaled_softmax(x, y))
    assert len(compiled_programs) == 1


def windows(cache, new):
    """A sliding window's cache keeps its last 4095 positions, all of a shorter one (its start
    stops at 0); another slice ends before the end; the new length is returned as a number."""
    grown = torch.cat([cache, new], dim=-2)
    return grown[:, -4095:] * 2, grown[:, -5:-1] + 1, grown.shape[-2] + 1


def test_slices_counted_from_the_end_of_a_symbolic_axis_stop_at_its_start(compiled_programs):
    f = torch.compile(windows, backend="lamina", dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for length in (6, 9, 13, 40):
            cache, new = torch.randn(3, length, 8), torch.randn(3, 1, 8)
            ours, expected = f(cache, new), windows(cache, new)
            torch.testing.assert_close(ours[:2], expected[:2])
            assert ours[2] == expected[2]
    assert len(compiled_programs) == 1


def slices_from_run_time_starts(x):
    """Slices whose start is a size known only at run time and negative (counted from the end), to
    the end, to a number and to a negative end, and one from a number to such a size."""
    rows = x.shape[0]
    return x[:, 1 - rows:] * 2, x[:, -rows:60] + 1, x[:, -rows:-2] * 3, x[:rows - 1, 2:rows] - 1


def test_slices_from_starts_known_only_at_run_time_match_eager(compiled_programs):
    f = torch.compile(slices_from_run_time_starts, backend="lamina", dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for rows in (9, 12, 30):
            x = torch.randn(rows, 64)
            for ours, expected in zip(f(x), slices_from_run_time_starts(x)):
                torch.testing.assert_close(ours, expected)
    assert len(compiled_programs) == 1


def test_a_number_argument_that_dynamo_made_symbolic_compiles_once(compiled_programs):
    """A number argument (a cache's length kept as a Python int) is a size of the program, passed as a
    tensor of that length that no kernel reads; a float computed from a size (a scale) likewise."""
    def scaled(x, n):
        return x * n / math.sqrt(x.shape[0])

    f = torch.compile(scaled, backend="lamina", dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for rows, n in ((3, 2), (5, 3), (9, 7)):
            x = torch.randn(rows, 6)
            torch.testing.assert_close(f(x, n), scaled(x, n))
    assert len(compiled_programs) == 1


def test_a_convolution_over_a_length_known_only_at_run_time_compiles_once(compiled_programs):
    """Mamba's causal convolution: a kernel of 4 over the sequence, padded by 3."""
    weight = torch.randn(8, 1, 4)

    def causal(x):
        return torch.nn.functional.conv1d(x, weight, padding=3, groups=8)[..., :x.shape[-1]]

    f = torch.compile(causal, backend="lamina", dynamic=True)
    for length in (5, 13, 40):
        x = torch.randn(2, 8, length)
        torch.testing.assert_close(f(x), causal(x))
    assert len(compiled_programs) == 1


def scores_by_head(x):
    """Bloom's scores viewed by head with a -1 (their count divided out of a product of symbols),
    and positions picked at either end of a symbolic axis (ALBERT's pooler reads the first)."""
    scores = x @ x.transpose(-1, -2)
    return scores.view(2, 4, x.shape[1], -1).softmax(-1), x[:, 0] * 2, x[:, -1] + 1


def test_views_and_picks_of_a_symbolic_axis_compile_once(compiled_programs):
    """Dynamo makes the length symbolic once it has changed: the first length, then every other."""
    f = torch.compile(scores_by_head, backend="lamina")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for length in (5, 9, 30):
            x = torch.randn(8, length, 16)
            for ours, expected in zip(f(x), scores_by_head(x)):
                torch.testing.assert_close(ours, expected)
    assert len(compiled_programs) == 2


def test_a_symbolic_program_runs_at_size_one(compiled_programs):
    """Dynamo compiles a size of 1 apart (it never makes one symbolic); lamina's program takes it too."""
    torch.compile(scaled_softmax, backend="lamina", dynamic=True)(torch.randn(3, 5), torch.randn(5))
    (program,) = compiled_programs
    for rows, columns in [(1, 1), (1, 7), (9, 1)]:
        x, y = torch.randn(rows, columns), torch.randn(columns)
        (out,) = program([rows, columns, x, y], torch.device("cpu"))
        torch.testing.assert_close(out, scaled_softmax(x, y))


def test_a_cache_that_grows_at_each_call_compiles_once(compiled_programs):
    f = torch.compile(grown, backend="lamina", dynamic=True)
    for length in (3, 17, 64, 5):  # none equal to another size, which Dynamo would give one symbol
        cache, new = torch.randn(2, 4, length, 16), torch.randn(2, 4, 1, 16)
        torch.testing.assert_close(f(cache, new), grown(cache, new))
    assert len(compiled_programs) == 1


def test_a_growing_cache_is_copied_in_vectors_by_the_pointwise_schedule(compiled_programs):
    """Without ``dynamic=True``, Dynamo makes only the size that changed symbolic (the cache's
    length): the rows stay numbers, so the pointwise schedule reads and writes them in vectors."""
    f = torch.compile(grown, backend="lamina")
    for length in (3, 17, 64, 5):
        cache, new = torch.randn(2, 4, length, 16), torch.randn(2, 4, 1, 16)
        torch.testing.assert_close(f(cache, new), grown(cache, new))
    first, symbolic = compiled_programs
    (tile,) = symbolic.compilation.tiles
    assert tile.schedule == "pointwise" and tile.vector_width == 4
    assert "parallel i0 * i1 * i2 * i3 (s0 * 128 + 128)" in symbolic.compilation.ir("tile")
    cache, new = torch.randn(2, 4, 1, 16), torch.randn(2, 4, 1, 16)
    (out,) = symbolic([1, cache, new], torch.device("cpu"))  # Dynamo passes the length first
    torch.testing.assert_close(out, grown(cache, new))


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


@pytest.mark.parametrize("first", [40, 3000], ids=["a_row_a_block", "rows_sharing_a_block"])
def test_a_norm_over_rows_counted_at_run_time_runs_on_the_row_reduction_schedule(first, compiled_programs):
    """A prompt's norms: rows counted only at run time, each of a length that is a number."""
    f = torch.compile(rms_norm, backend="lamina")
    w = torch.randn(64)
    for rows in (first + 1, first, 7, 130):
        x = torch.randn(rows, 64)
        torch.testing.assert_close(f(x, w), rms_norm(x, w))
    symbolic = compiled_programs[-1]
    (tile,) = symbolic.compilation.tiles
    assert tile.schedule == "row_reduction" and sizes.is_symbolic(tile.grid[0].extent)
    x = torch.randn(1, 64)
    (out,) = symbolic([1, x, w], torch.device("cpu"))
    torch.testing.assert_close(out, rms_norm(x, w))


def test_the_printed_ir_shows_the_sizes_as_symbols(compiled_programs):
    torch.compile(scaled_softmax, backend="lamina", dynamic=True)(torch.randn(3, 5), torch.randn(5))
    (program,) = compiled_programs
    compilation = program.compilation
    assert str(compilation.ir("torch")).splitlines()[0] == "graph(arg2_1: f32[s0, s1], arg3_1: f32[s1]):"
    assert "  kernel _softmax_sum(arg2_1: f32[s0, s1], arg3_1: f32[s1]) -> " \
           "(_softmax_max: f32[s0, 1], _softmax_sum: f32[s0, 1]):" in compilation.ir("loop").splitlines()
    assert "      for r0 in reduce(s1):" in compilation.ir("loop").splitlines()
    kernel = compilation.ir("kernel").split("\n\n")[0].splitlines()
    assert kernel[0].startswith("kernel _softmax_sum  grid (s0, 1, 1)  block (32, 1, 1)")  # a warp per row
    assert "  size s0" in kernel and "  size s1" in kernel
    assert "  for j in 0..(s1 + 31) // 32:" in kernel and "    if threadIdx.x + j * 32 < s1:" in kernel


def test_kernels_of_symbolic_sizes_compile_with_nvrtc_taking_the_sizes_by_value(compiled_programs):
    torch.compile(grown, backend="lamina", dynamic=True)(torch.randn(2, 4, 5, 16), torch.randn(2, 4, 1, 16))
    (program,) = compiled_programs
    kernels = program.compilation.kernels
    assert any(k.sizes for k in kernels.kernels)
    assert "const long long s0" in "".join(program.compilation.sources.values())
    compiled = CudaBackend().compile(kernels, "sm_90")
    assert all(k.cubin for k in compiled.values())


def test_inputs_whose_sizes_disagree_with_each_other_are_refused(compiled_programs):
    torch.compile(scaled_softmax, backend="lamina", dynamic=True)(torch.randn(3, 5), torch.randn(5))
    (program,) = compiled_programs
    with pytest.raises(InputMismatchError, match=r"has shape \[6\], but the program takes \[s1\] with s0 = 3, s1 = 5"):
        program([3, 5, torch.randn(3, 5), torch.randn(6)], torch.device("cpu"))


def test_a_graph_that_needs_concrete_sizes_says_why_and_compiles_each_size(compiled_programs):
    def in_threes(x):
        return x.reshape(-1, 3) * 2  # whether s0 * s1 is a multiple of 3 depends on the sizes

    f = torch.compile(in_threes, backend="lamina", dynamic=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for rows in (3, 5, 9):
            x = torch.randn(rows, 6)
            torch.testing.assert_close(f(x), in_threes(x))
    said = [str(w.message) for w in caught]
    assert any("for each new size of its dynamic dimensions: aten.view.default" in s and "cannot tell" in s
               for s in said), said
    assert any("compiles this graph again for new sizes" in s for s in said), said
    assert len(compiled_programs) == 3


@pytest.mark.gpu
def test_a_dynamic_graph_runs_on_the_gpu_at_every_size_from_one_compile(compiled_programs):
    f = torch.compile(scaled_softmax, backend="lamina", dynamic=True)
    for rows, columns in SIZES:
        x, y = torch.randn(rows, columns, device="cuda"), torch.randn(columns, device="cuda")
        torch.testing.assert_close(f(x, y), scaled_softmax(x, y))
    (program,) = compiled_programs
    x, y = torch.randn(1, 9, device="cuda"), torch.randn(9, device="cuda")
    (out,) = program([1, 9, x, y], torch.device("cuda"))
    torch.testing.assert_close(out, scaled_softmax(x, y))


def test_a_kernel_too_large_for_the_generic_schedule_makes_the_graph_compile_for_each_size(
        compiled_programs, monkeypatch):
    """Without the row-reduction schedule, only the generic one takes sums down a symbolic number of
    rows, one thread per output: a kernel of symbolic sizes with more work than that suits (a small
    limit stands for a large kernel) makes the graph compile for each concrete size instead."""
    from lamina.plugins.schedules.generic import tiling

    monkeypatch.setattr(tiling, "SYMBOLIC_WORK_LIMIT", 1000)

    def column_sums(x):
        return x.sum(0)

    f = torch.compile(column_sums, backend="lamina", dynamic=True, options={"disable": ["lamina.builtin.schedules.row_reduction"]})
    with pytest.warns(UserWarning, match="would run 1200 iterations one thread per point"):
        for rows in (50, 60, 70):
            x = torch.randn(rows, 24)
            torch.testing.assert_close(f(x), column_sums(x))
    assert [p.compilation.graph.inputs[0].type.shape for p in compiled_programs] == [(50, 24), (60, 24), (70, 24)]


def tail_and_positions(x):
    """A slice from the end and positions up to a size, as a model's last logits and its rotary
    positions take them."""
    return x[:, -3:, :] * 2, torch.arange(x.shape[1]) + x.shape[1], x[:, 1:, :].sum(-1)


def test_slices_and_positions_bounded_by_symbolic_sizes_compile_once(compiled_programs):
    f = torch.compile(tail_and_positions, backend="lamina", dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for batch, length in ((2, 5), (3, 9), (2, 40)):
            x = torch.randn(batch, length, 7)
            for got, expected in zip(f(x), tail_and_positions(x)):
                torch.testing.assert_close(got, expected)
    assert len(compiled_programs) == 1


def means(x):
    return x.mean(1) * 2 + x.mean()


def test_a_mean_over_a_symbolic_axis_divides_by_its_count_at_run_time(compiled_programs):
    f = torch.compile(means, backend="lamina", dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for rows, columns in SIZES:
            x = torch.randn(rows, columns)
            torch.testing.assert_close(f(x), means(x))
    assert len(compiled_programs) == 1


def decoding_attention(q, past_keys, past_values, new_key, new_value, mask):
    """A decoding step of the default cache through the attention op that SDPA calls on CUDA, whose
    shapes Dynamo does not check: the keys', values' and mask's lengths are three symbols."""
    keys, values = torch.cat([past_keys, new_key], 2), torch.cat([past_values, new_value], 2)
    return torch.ops.aten._scaled_dot_product_cudnn_attention(q, keys, values, mask, False, 0.0, False, False)[0]


def decoding_inputs(past: int, values_past: int | None = None, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    values_past = past if values_past is None else values_past
    shapes = [(1, 4, 1, 16), (1, 4, past, 16), (1, 4, values_past, 16), (1, 4, 1, 16), (1, 4, 1, 16),
              (1, 1, 1, past + 1)]
    return [torch.randn(s, generator=generator) for s in shapes]


def test_the_lengths_that_an_attention_op_needs_equal_are_one_symbol(compiled_programs):
    """Every step of a growing cache runs one program (the first step's, with its sizes as numbers,
    aside); a call whose keys and values differ in length is refused, not computed."""
    f = torch.compile(decoding_attention, backend="lamina")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for past in (5, 6, 7, 37):
            q, keys, values, key, value, mask = decoding_inputs(past, seed=past)
            expected = torch.nn.functional.scaled_dot_product_attention(
                q, torch.cat([keys, key], 2), torch.cat([values, value], 2), attn_mask=mask)
            torch.testing.assert_close(f(q, keys, values, key, value, mask), expected)
    assert len(compiled_programs) == 2
    symbolic = compiled_programs[1].compilation.graph
    assert sizes.symbols(tuple(size for i in symbolic.inputs for size in i.type.shape)) == {"s0"}
    with pytest.raises(InputMismatchError, match="s0 = 9"):
        f(*decoding_inputs(9, values_past=10))

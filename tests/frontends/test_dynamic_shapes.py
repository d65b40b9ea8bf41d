"""``lamina.compile(..., dynamic_shapes=...)``: axes declared dynamic as ``torch.export`` takes
them (``torch.export.Dim``) are compiled once for every size in their range."""

import warnings

import pytest
import torch

import lamina
from lamina.backends.cuda.backend import CudaBackend
from lamina.core.errors import InputMismatchError, LaminaError
from lamina.models.architectures import architecture, build, example_inputs


def scaled_projection(x, w):
    return torch.softmax(x @ w, dim=-1) * 2


SEQ = torch.export.Dim("seq", min=2, max=4096)


def test_a_dynamic_axis_compiles_once_and_runs_at_every_size_in_its_range():
    w = torch.randn(16, 24)
    compiled = lamina.compile(scaled_projection, (torch.randn(8, 16), w), dynamic_shapes=({0: SEQ}, None))
    assert compiled.ir("torch").splitlines()[0].startswith("graph(x: f32[s0, 16], w: f32[16, 24]")
    assert "grid (2, (s0 + 7) // 8, 1)" in compiled.ir("tile")
    for rows in (8, 3, 130, 2):  # 130 and 3: no multiple of a block's rows
        x = torch.randn(rows, 16)
        torch.testing.assert_close(compiled(x, w), scaled_projection(x, w))
    assert len(compiled.specializations) == 1


def test_a_builtin_function_takes_dynamic_shapes_per_argument():
    """``F.linear`` has no signature Python reads: export sees one argument, the tuple of all."""
    w, bias = torch.randn(24, 16), torch.randn(24)
    compiled = lamina.compile(torch.nn.functional.linear, (torch.randn(8, 16), w, bias),
                              dynamic_shapes=({0: SEQ}, None, None))
    for rows in (8, 3, 70):
        x = torch.randn(rows, 16)
        torch.testing.assert_close(compiled(x, w, bias), torch.nn.functional.linear(x, w, bias), rtol=1e-4, atol=1e-4)
    assert len(compiled.specializations) == 1


def padded_to_a_multiple_of_8(x):
    """What SDPA does on CUDA to an attention mask: its last axis padded to a multiple of 8."""
    n = x.shape[-1]
    return torch.nn.functional.pad(x, (0, -((n + 1) % 8) + 7), value=-1.0) * 2


def test_a_pad_of_a_width_known_only_at_run_time_compiles_once():
    compiled = lamina.compile(padded_to_a_multiple_of_8, (torch.randn(3, 13),), dynamic_shapes=({1: SEQ},))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in (13, 5, 16, 31, 100):
            x = torch.randn(3, n)
            torch.testing.assert_close(compiled(x), padded_to_a_multiple_of_8(x))
    assert len(compiled.specializations) == 1


def test_a_size_outside_the_declared_range_is_refused_and_another_static_shape_compiles_again():
    w = torch.randn(16, 24)
    compiled = lamina.compile(scaled_projection, (torch.randn(8, 16), w), dynamic_shapes=({0: SEQ}, None))
    with pytest.raises(InputMismatchError, match=r"axis 0 of x takes sizes from 2 to 4096 \(the program's s0, as "
                                                 r"dynamic_shapes declared it\), and this call has 1"):
        compiled(torch.randn(1, 16), w)
    x, wider = torch.randn(5, 16), torch.randn(16, 40)
    torch.testing.assert_close(compiled(x, wider), scaled_projection(x, wider))
    assert len(compiled.specializations) == 2


def test_a_program_that_needs_concrete_sizes_says_why_and_compiles_for_the_example(monkeypatch):
    """Without the row-reduction schedule, only the generic one takes sums down a dynamic number of
    rows; with more work than it suits (a small limit stands for a large kernel), the program is
    compiled for the example's sizes, and another size compiles again."""
    from lamina.plugins.schedules.generic import tiling

    monkeypatch.setattr(tiling, "SYMBOLIC_WORK_LIMIT", 10)

    def column_sums(x):
        return x.sum(0)

    x = torch.randn(6, 5)
    with pytest.warns(UserWarning, match="compiles this program for each size of its dynamic axes"):
        compiled = lamina.compile(column_sums, (x,), dynamic_shapes=({0: SEQ},),
                                  disable=["lamina.builtin.schedules.row_reduction"])
    torch.testing.assert_close(compiled(x), column_sums(x))
    other = torch.randn(9, 5)
    torch.testing.assert_close(compiled(other), column_sums(other))
    assert len(compiled.specializations) == 2


def test_a_language_model_compiled_for_any_prompt_length_matches_eager():
    arch = architecture("llama")
    model = build(arch, size="small")
    seq = torch.export.Dim("seq", min=2, max=512)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled = lamina.compile(model, example_kwargs=example_inputs(arch, model, length=13),
                                  dynamic_shapes={"input_ids": {1: seq}, "attention_mask": {1: seq}})
        for length in (13, 32, 7):
            inputs = example_inputs(arch, model, length=length, seed=length)
            torch.testing.assert_close(compiled(**inputs).logits, model(**inputs).logits, rtol=1e-4, atol=1e-4)
    assert len(compiled.specializations) == 1
    assert "contraction" in {tile.schedule for tile in compiled.compilation.tiles}
    kernels = compiled.compilation.kernels
    attention = [kernel for kernel in kernels.kernels if kernel.name.startswith("scaled_dot_product")]
    assert attention and all(kernel.sizes for kernel in attention)  # the prompt's attention, of any length
    assert all(k.cubin for k in CudaBackend().compile(kernels, "sm_90a").values())  # NVRTC takes every kernel


def test_a_row_of_a_dynamic_length_cannot_be_pinned_into_registers():
    x = torch.randn(4, 40)
    with pytest.raises(LaminaError, match="row_in_registers = true needs a row whose length is a number, and "
                                          "this row has s1 elements"):
        lamina.compile(lambda x: torch.softmax(x, -1), (x,), dynamic_shapes=({0: SEQ, 1: torch.export.Dim("row")},),
                       knobs={"row_reduction": {"row_in_registers": True}})

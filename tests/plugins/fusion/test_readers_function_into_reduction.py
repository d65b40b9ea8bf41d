"""A reduction computes the function that all its readers apply to each of its elements
(attention's scale and mask), and only when every reader applies that same function to
the whole of the result."""

import torch
import torch.nn.functional as F

import lamina
from lamina.bench.measure import float64_reference, relative_error
from lamina.core.ir import loop_ir


def loop_program(fn, *shapes):
    torch.manual_seed(0)
    inputs = tuple(torch.randn(*s) for s in shapes)
    return inputs, lamina.Compiler(target="sm_90").compile(fn, inputs)


def stored(program, kernel_name):
    kernel = next(k for k in program.kernels if k.name == kernel_name)
    return [line.strip() for line in loop_ir.format_kernel(kernel).splitlines() if " = " in line and "[" in line.split(" = ")[0]]


def sdpa_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_causal_attention_scores_are_stored_scaled_and_masked_and_read_behind_the_mask():
    shape = (1, 2, 300, 16)
    inputs, compiled = loop_program(sdpa_causal, shape, shape, shape)
    program = compiled.compilation.loop
    scores = program.kernels[0].name
    assert stored(program, scores) == [f"{scores}[i0, i1, i2, i3] = where(i3 <= i2, acc0 * 0.25, -inf)"]
    statistics = loop_ir.format_kernel(program.kernels[1])
    assert f"max(acc0, where(r0 <= i2, {scores}[0, i1, i2, r0], -inf))" in statistics
    assert "0.25" not in statistics
    assert relative_error(compiled(*inputs), float64_reference(sdpa_causal, inputs)) < 1e-5


def test_readers_that_apply_different_functions_read_the_sum_itself():
    def two_readers(q, k):
        s = q @ k.transpose(-1, -2)
        return torch.softmax(s * 0.5, -1), torch.softmax(s * 0.25, -1)

    _, compiled = loop_program(two_readers, (2, 1100, 8), (2, 1100, 8))
    program = compiled.compilation.loop
    assert stored(program, program.kernels[0].name) == [f"{program.kernels[0].name}[i0, i1, i2] = acc0"]


def test_a_reader_of_part_of_the_result_leaves_the_function_to_it():
    def left_half(q, k):
        s = q @ k.transpose(-1, -2)
        return torch.softmax(s[:, :, :550] * 0.5, -1)

    inputs, compiled = loop_program(left_half, (2, 1100, 8), (2, 1100, 8))
    program = compiled.compilation.loop
    assert stored(program, program.kernels[0].name) == [f"{program.kernels[0].name}[i0, i1, i2] = acc0"]


def test_scores_that_fit_in_rows_are_fused_before_their_mask_moves():
    def scores_causal(q, k):
        s = q @ k.transpose(-1, -2) * 0.125
        return torch.softmax(s.masked_fill(torch.ones(128, 128, dtype=torch.bool).triu(1), float("-inf")), -1)

    _, compiled = loop_program(scores_causal, (1, 2, 128, 16), (1, 2, 128, 16))
    (tile,) = compiled.compilation.tiles
    assert tile.schedule == "matmul_row_reduction"
    assert dict(tile.knobs)["element"].count("where") == 1

"""A rotary embedding's cosines and sines, read by every layer's query and key rotations for each
of their heads, are computed once and stored, where recomputing them in each reader would cost
more than a launch; a decoding step's few stay inlined."""

import torch

import lamina
from lamina.bench.measure import relative_error
from lamina.core.ir import loop_ir

HEADS, KV_HEADS, DEPTH = 32, 4, 64


def _rotated(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin


def two_layers(q, k, inverse_frequencies):
    """The rotations of two layers' queries and keys, the tables computed as Hugging Face's
    rotary embedding computes them."""
    positions = torch.arange(q.shape[-2], dtype=torch.float32)
    angles = positions[:, None] * inverse_frequencies[None, :]
    angles = torch.cat((angles, angles), -1)
    cos, sin = angles.cos().to(q.dtype), angles.sin().to(q.dtype)
    out = []
    for layer in range(2):
        out += [_rotated(q * (layer + 1), cos, sin), _rotated(k * (layer + 1), cos, sin)]
    return tuple(out)


def inputs(length):
    q = torch.randn(1, HEADS, length, DEPTH, dtype=torch.bfloat16)
    k = torch.randn(1, KV_HEADS, length, DEPTH, dtype=torch.bfloat16)
    return q, k, 1.0 / 10000 ** (torch.arange(0, DEPTH, 2).float() / DEPTH)


def _computing(program, op):
    return [k.name for k in program.kernels if f"{op}(" in loop_ir.format_kernel(k)]


def test_the_tables_of_a_prompt_are_computed_once_and_match_eager():
    torch.manual_seed(3)
    args = inputs(256)
    compiled = lamina.compile(two_layers, args, target="sm_90")
    program = compiled.compilation.loop
    assert len(_computing(program, "cos")) == 1 and len(_computing(program, "sin")) == 1, compiled.ir("loop")
    assert all(relative_error(out, expected) < 1e-2 for out, expected in zip(compiled(*args), two_layers(*args)))


def test_a_decoding_step_recomputes_its_few_values_in_each_rotation():
    compiled = lamina.compile(two_layers, inputs(1), target="sm_90")
    program = compiled.compilation.loop
    assert len(_computing(program, "cos")) == 4, compiled.ir("loop")

"""A residual stream is written once per layer, not recomputed from every earlier layer."""

import pytest
import torch

import lamina
from lamina.bench.measure import float64_reference, relative_error


def residual_layers(count):
    def program(x, w, g):
        h = x
        for _ in range(count):
            normed = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * g
            h = h + torch.relu(normed @ w)
        return h

    return program


def inputs():
    return torch.randn(13, 40), torch.randn(40, 40) * 0.1, torch.randn(40)


@pytest.mark.parametrize("layers", [2, 5])
def test_each_layer_reads_the_stream_from_one_buffer(layers):
    program = residual_layers(layers)
    args = inputs()
    compiled = lamina.compile(program, args)
    assert relative_error(compiled(*args), float64_reference(program, args)) < 1e-5
    for kernel in compiled.compilation.loop.kernels:
        streams = [b for b in kernel.inputs if b.type.shape == (13, 40) and b.name != "x"]
        assert len(streams) <= 1, f"kernel {kernel.name} reads {[b.name for b in streams]}"


def test_temporary_memory_does_not_grow_with_depth():
    args = inputs()
    shallow = lamina.compile(residual_layers(4), args).memory_plan.peak_bytes
    deep = lamina.compile(residual_layers(8), args).memory_plan.peak_bytes
    assert deep == shallow

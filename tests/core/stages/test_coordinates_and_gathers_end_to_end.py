"""Programs whose Tensor IR uses output coordinates and gathered indices, through all six levels on the simulator."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.backends.cuda.nvrtc import compile_kernel
from lamina.bench.measure import relative_error


class Lookup(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Embedding(37, 19)

    def forward(self, ids):
        return self.table(ids)


def grouped_causal_attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


CASES = {
    "embedding": (Lookup(), lambda: (torch.randint(0, 37, (3, 11)),)),
    "arange-times-x": (lambda x: torch.arange(x.shape[-1], device=x.device) * x, lambda: (torch.randn(5, 23),)),
    "cat": (lambda a, b: torch.cat([a, b], 1), lambda: (torch.randn(5, 7), torch.randn(5, 10))),
    "triu-where": (lambda x, y: torch.where(x.triu(1) > 0, x, y), lambda: (torch.randn(13, 17), torch.randn(13, 17))),
    "sdpa-gqa-causal": (grouped_causal_attention,
                        lambda: (torch.randn(1, 4, 13, 16), torch.randn(1, 2, 13, 16), torch.randn(1, 2, 13, 16))),
}


@pytest.mark.parametrize("name", list(CASES))
def test_program_matches_eager_pytorch_on_the_simulator(name):
    fn, make_inputs = CASES[name]
    inputs = make_inputs()
    out = lamina.compile(fn, inputs)(*inputs)
    with torch.no_grad():
        expected = fn(*inputs)
    assert out.shape == expected.shape
    assert relative_error(out, expected) < 1e-5


@pytest.mark.parametrize("name", ["embedding", "sdpa-gqa-causal"])
def test_every_emitted_kernel_compiles_for_sm_90(name):
    fn, make_inputs = CASES[name]
    compiled = lamina.compile(fn, make_inputs())
    for kernel in compiled.compilation.kernels.kernels:
        result = compile_kernel(compiled.compilation.sources[kernel.name], kernel.name, "sm_90")
        assert result.registers > 0


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(CASES))
def test_program_matches_eager_pytorch_on_the_gpu(name):
    fn, make_inputs = CASES[name]
    if isinstance(fn, torch.nn.Module):
        fn = copy.deepcopy(fn).to("cuda")
    inputs = tuple(t.to("cuda") for t in make_inputs())
    out = lamina.compile(fn, inputs)(*inputs)
    with torch.no_grad():
        expected = fn(*inputs)
    assert out.is_cuda
    assert relative_error(out, expected) < 1e-5

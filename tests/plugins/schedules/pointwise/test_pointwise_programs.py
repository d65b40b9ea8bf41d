"""Elementwise PyTorch programs through all six levels onto the pointwise schedule, run on
the simulator against eager PyTorch."""

import pytest
import torch

import lamina
from lamina.bench.measure import float64_reference, relative_error


def silu_up(gate, up):
    return torch.nn.functional.silu(gate) * up


def rope(x, cos, sin):
    return x * cos + torch.cat((-x[..., 64:], x[..., :64]), -1) * sin


PROGRAMS = {
    "silu_up": (silu_up, [(6, 40), (6, 40)]),
    "rope": (rope, [(1, 2, 3, 128), (3, 128), (3, 128)]),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_program_matches_pytorch(name, dtype):
    fn, shapes = PROGRAMS[name]
    inputs = tuple(torch.randn(s).to(dtype) for s in shapes)
    compiled = lamina.compile(fn, inputs)
    assert [t.schedule for t in compiled.compilation.tiles] == ["pointwise"]
    assert compiled.compilation.tiles[0].vector_width == 16 // dtype.itemsize
    out = compiled(*inputs)
    assert out.dtype == dtype
    assert relative_error(out, float64_reference(fn, inputs)) < (1e-5 if dtype == torch.float32 else 1e-2)


def test_an_input_that_starts_off_the_vector_alignment_is_read_correctly():
    """A view 4 bytes into its storage cannot be read with 16-byte loads: it is copied first."""
    fn, shapes = PROGRAMS["silu_up"]
    inputs = tuple(torch.randn(s) for s in shapes)
    compiled = lamina.compile(fn, inputs)
    storage = torch.randn(6 * 40 + 1)
    shifted = storage[1:].view(6, 40)
    assert shifted.data_ptr() % 16 != 0
    out = compiled(shifted, inputs[1])
    assert relative_error(out, float64_reference(fn, (shifted, inputs[1]))) < 1e-5

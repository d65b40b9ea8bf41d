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
    "silu_up": (silu_up, [(48, 40), (48, 40)]),
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


def rotated(x, angle):
    return x * torch.cos(angle) + torch.cat((-x[..., 32:], x[..., :32]), -1) * torch.sin(angle)


@pytest.mark.parametrize("fn,width", [(rotated, 2), (torch.mul, 8)], ids=["functions", "products"])
def test_few_elements_computing_functions_spread_over_a_block(fn, width):
    """256 elements (a decoding step's keys, rotated) with a sine and a cosine each run on 128
    threads of 2 lanes, not one warp of 8; a plain product keeps the widest vector."""
    inputs = (torch.randn(4, 64).to(torch.bfloat16), torch.randn(4, 64).to(torch.bfloat16))
    compiled = lamina.compile(fn, inputs)
    (tile,) = compiled.compilation.tiles
    assert tile.vector_width == width
    assert relative_error(compiled(*inputs), float64_reference(fn, inputs)) < 1e-2


def test_an_input_that_starts_off_the_vector_alignment_is_read_correctly():
    """A view 4 bytes into its storage cannot be read with 16-byte loads: it is copied first."""
    fn, shapes = PROGRAMS["silu_up"]
    inputs = tuple(torch.randn(s) for s in shapes)
    compiled = lamina.compile(fn, inputs)
    storage = torch.randn(48 * 40 + 1)
    shifted = storage[1:].view(48, 40)
    assert shifted.data_ptr() % 16 != 0
    out = compiled(shifted, inputs[1])
    assert relative_error(out, float64_reference(fn, (shifted, inputs[1]))) < 1e-5


def write_at(cache, positions, values):
    return torch.ops.aten.index_put.default(cache, [None, None, positions], values)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("written", [[36], [0], [-1]])
def test_a_cache_written_at_a_loaded_position_is_read_in_vectors(written, dtype):
    """A decoding step's key-value cache update: the position is loaded, the same in every lane,
    so the new keys and the rest of the cache are read in vectors (the simulator checks their
    alignment)."""
    cache, values = torch.randn(2, 3, 37, 64).to(dtype), torch.randn(2, 3, len(written), 64).to(dtype)
    positions = torch.tensor(written)
    compiled = lamina.compile(write_at, (cache, positions, values))
    (tile,) = [t for t in compiled.compilation.tiles if t.schedule == "pointwise"]
    loads = dict(tile.knobs)["vector_loads"]
    assert tile.vector_width == 16 // dtype.itemsize and "values[" in loads and "cache[" in loads
    assert torch.equal(compiled(cache, positions, values), write_at(cache, positions, values))


def test_an_embedding_row_is_read_in_vectors():
    table, ids = torch.randn(50, 24), torch.tensor([[3, 49, 0], [7, 7, 12]])
    compiled = lamina.compile(torch.nn.functional.embedding, (ids, table))
    (tile,) = compiled.compilation.tiles
    assert tile.vector_width == 4 and dict(tile.knobs)["vector_loads"] == "weight[input[i0, i1], i2]"
    assert torch.equal(compiled(ids, table), torch.nn.functional.embedding(ids, table))

"""Small matmuls compile and match eager; a contraction no setting can run goes to the next
schedule, unless a knob of the contraction is pinned."""

import attrs
import pytest
import torch

import lamina
from lamina.core.errors import ScheduleError
from lamina.core.pipeline import Pipeline


def matmul(x, w):
    return x @ w


def cat_then_matmul(x, w):
    return torch.cat([x, torch.tanh(x)], 1) @ w


def small_linear():
    torch.manual_seed(0)
    return torch.nn.Linear(3, 3)


SMALL_PRODUCTS = {
    "4x3_by_3x3": (matmul, lambda: (torch.randn(4, 3), torch.randn(3, 3))),
    "2x8_by_8x8": (matmul, lambda: (torch.randn(2, 8), torch.randn(8, 8))),
    "2x7_by_7x5": (matmul, lambda: (torch.randn(2, 7), torch.randn(7, 5))),
    "linear_3_on_2x2x3": (small_linear(), lambda: (torch.randn(2, 2, 3),)),
    "cat_of_tanh_then_matmul": (cat_then_matmul, lambda: (torch.randn(2, 3), torch.randn(6, 4))),
}


def in_float64(program, inputs):
    if isinstance(program, torch.nn.Module):
        return program.double()(*(x.double() for x in inputs)).float()
    return program(*(x.double() for x in inputs)).float()


@pytest.mark.parametrize("name", SMALL_PRODUCTS)
def test_small_products_compile_and_match_eager_in_float64(name):
    program, make_inputs = SMALL_PRODUCTS[name]
    torch.manual_seed(1)
    inputs = make_inputs()
    compiled = lamina.compile(program, inputs)
    out = compiled(*inputs)
    torch.testing.assert_close(out, in_float64(program, inputs), rtol=1e-5, atol=1e-5)


@pytest.fixture
def little_shared_memory(monkeypatch):
    """A target whose blocks may not stage even one k-tile, so that no contraction setting can run."""
    original = Pipeline.target
    monkeypatch.setattr(Pipeline, "target",
                        lambda self, arch=None: attrs.evolve(original(self, arch), max_shared_bytes_optin=16))


def test_a_contraction_no_setting_can_run_goes_to_the_next_schedule(little_shared_memory):
    torch.manual_seed(2)
    x, w = torch.randn(4, 3), torch.randn(3, 3)
    compiled = lamina.compile(matmul, (x, w))
    (tile,) = compiled.compilation.tiles
    assert tile.schedule == "generic"
    tile_text = compiled.ir("tile")
    assert "passed_over = contraction: kernel" in tile_text
    assert "no setting can run:" in tile_text and "shared memory exceed the 16 B" in tile_text
    assert "with  " not in tile_text
    torch.testing.assert_close(compiled(x, w), in_float64(matmul, (x, w)), rtol=1e-5, atol=1e-5)


def test_a_pinned_setting_that_cannot_run_is_an_error_naming_the_pin(little_shared_memory):
    compiler = lamina.Compiler(knobs={"contraction.block_k": 8})
    with pytest.raises(ScheduleError, match=r"contraction schedule: no setting with block_k = 8 can run: .*shared "
                                            r"memory exceed the 16 B.*Pin other values, or unpin"):
        compiler.compile(matmul, (torch.randn(4, 3), torch.randn(3, 3)))

"""An expensive value that a matmul would recompute for hundreds of output columns is stored once."""

import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.bench.measure import float64_reference, relative_error
from lamina.core.ir import loop_ir
from lamina.plugins.fusion import analysis


def down_projection(h, g, u, w):
    return h + F.linear(F.silu(g) * u, w)


def biased(x, bias, w):
    return torch.relu(F.linear(x + bias, w))


def kernels_reading(compiled, name):
    return [k.name for k in compiled.compilation.loop.kernels if any(b.name == name for b in k.inputs)]


@pytest.mark.parametrize("columns", [analysis.RECOMPUTE_LIMIT + 3, 2 * analysis.RECOMPUTE_LIMIT + 5])
def test_silu_times_up_before_a_wide_linear_is_written_once(columns):
    inputs = (torch.randn(5, columns), torch.randn(5, 40), torch.randn(5, 40), torch.randn(columns, 40))
    compiled = lamina.compile(down_projection, inputs)
    first, second = compiled.compilation.loop.kernels
    assert "sigmoid" in loop_ir.format_kernel(first) and "sigmoid" not in loop_ir.format_kernel(second)
    assert kernels_reading(compiled, first.name) == [second.name]
    assert relative_error(compiled(*inputs), float64_reference(down_projection, inputs)) < 1e-5


def test_before_a_narrow_linear_it_stays_in_the_operand():
    inputs = (torch.randn(5, 30), torch.randn(5, 40), torch.randn(5, 40), torch.randn(30, 40))
    compiled = lamina.compile(down_projection, inputs)
    assert compiled.kernel_count == 1
    assert relative_error(compiled(*inputs), float64_reference(down_projection, inputs)) < 1e-5


def test_a_cheap_prologue_stays_in_a_wide_linear():
    inputs = (torch.randn(7, 33), torch.randn(33), torch.randn(2 * analysis.RECOMPUTE_LIMIT, 33))
    compiled = lamina.compile(biased, inputs)
    assert compiled.kernel_count == 1


def test_what_counts_as_expensive():
    x = torch.randn(4, 8)
    ir = lamina.compile(lambda a: torch.exp(a) + a / 3.0 + a / (a + 2.0), (x,)).compilation.loop
    (kernel,) = ir.kernels
    (store,) = [s for s in kernel.body[0].body[0].body]
    assert analysis.expensive(store.value)
    cheap = lamina.compile(lambda a: a * 2.0 + a / 4.0, (x,)).compilation.loop.kernels[0]
    assert not analysis.expensive(cheap.body[0].body[0].body[0].value)


def test_a_pointwise_reader_of_a_broadcast_keeps_it_inlined():
    """Recomputing sigmoid(y) per row costs a memory-bound kernel nothing; storing it would cost a launch."""
    x, y = torch.randn(2 * analysis.RECOMPUTE_LIMIT + 1, 3), torch.randn(3)
    compiled = lamina.compile(lambda x, y: torch.relu(x + y) * 2.0 - torch.sigmoid(y), (x, y))
    assert compiled.kernel_count == 1


def attention_with_bias(q, k, v, bias):
    return torch.softmax(q @ k.transpose(-1, -2) + bias, -1) @ v


def test_attention_probabilities_are_written_once_before_the_product_with_the_values():
    """As T5's attention reaches lamina through torch.compile (PyTorch's attention math): the
    probabilities, an exponential, are stored rather than recomputed for each of a head's 64
    output columns by the product that reads them."""
    torch.manual_seed(0)
    inputs = (torch.randn(2, 20, 64), torch.randn(2, 23, 64), torch.randn(2, 23, 64), torch.randn(2, 20, 23))
    compiled = lamina.compile(attention_with_bias, inputs)
    last = compiled.compilation.loop.kernels[-1]
    assert "exp(" not in loop_ir.format_kernel(last), loop_ir.format_kernel(last)
    assert relative_error(compiled(*inputs), float64_reference(attention_with_bias, inputs)) < 1e-5

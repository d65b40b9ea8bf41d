"""A temporary that every reader casts to a narrower dtype is stored in that dtype, with the same results."""

import torch
import torch.nn.functional as F

import lamina
from lamina.backends.cuda.targets import SM90 as SM_90
from lamina.backends.reference.interpreter import interpret
from lamina.core.ir import dtypes
from lamina.plugins.fusion.store_narrowed_temporaries import StoreNarrowedTemporaries


def gated(x, w, v):
    return F.silu(F.linear(x, w)) * F.linear(x, v)


def bf16_inputs():
    torch.manual_seed(0)
    return tuple(torch.randn(shape).to(torch.bfloat16) for shape in ((5, 16), (24, 16), (24, 16)))


def test_a_bf16_linear_read_only_as_bf16_is_stored_as_bf16():
    compiled = lamina.compile(gated, bf16_inputs())
    (temporary,) = compiled.compilation.loop.temporaries
    assert temporary.type.dtype == dtypes.bfloat16
    assert "= bf16(acc0)" in compiled.ir("loop")


def test_narrowing_keeps_the_values_of_the_unfused_program():
    """The Tensor IR interpreter rounds the float32 sum to bfloat16 where the reader casts it;
    the narrowed program rounds it before the store: the same numbers."""
    inputs = bf16_inputs()
    compiled = lamina.compile(gated, inputs)
    names = [b.name for b in compiled.compilation.tensor.inputs]
    (unfused,) = interpret(compiled.compilation.tensor, dict(zip(names, inputs)))
    narrowed = compiled(*inputs)
    assert narrowed.dtype == unfused.dtype == torch.bfloat16
    assert torch.equal(narrowed, unfused)


def test_a_temporary_also_read_at_full_width_keeps_its_dtype():
    def both(x, w):
        y = F.linear(x, w)
        return y.to(torch.bfloat16) * 2, y.exp()

    x, w = torch.randn(5, 16), torch.randn(24, 16)
    rule = StoreNarrowedTemporaries()
    program = lamina.compile(both, (x, w)).compilation.loop
    assert rule.apply(program, SM_90, {}) is None
    assert all(b.type.dtype == dtypes.float32 for b in program.temporaries)


def test_float32_programs_are_left_alone():
    x, w, v = (t.float() for t in bf16_inputs())
    program = lamina.compile(gated, (x, w, v)).compilation.loop
    assert StoreNarrowedTemporaries().apply(program, SM_90, {}) is None

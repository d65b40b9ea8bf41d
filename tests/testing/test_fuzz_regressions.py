"""Every failure the program fuzzer found, as the smallest program that shows it.

Each test names the seed (and dtype) that found it: ``python -m lamina.testing.fuzz --seed S --dtype D``.
"""

import torch

import lamina


def test_bf16_variance_is_rounded_once_as_in_eager():
    # Found by seed 20123 (--dtype bfloat16): ``torch.sin(x.var(0))`` of a (2, 7) input was off by
    # 0.011, as the variance rounded its mean, deviations and squares to bf16, each a unit apart.
    torch.manual_seed(20123)
    x = torch.randn(2, 7).to(torch.bfloat16)

    def program(x):
        return torch.sin(x.var(0))

    expected = program(x.double())
    actual = lamina.compile(program, (x,))(x)
    assert actual.dtype == torch.bfloat16
    assert float((actual.double() - expected).abs().max()) < 6e-3  # eager bf16: 4.6e-3
    for statistic in (lambda x: x.var(0), lambda x: torch.var_mean(x, 1, correction=0)):
        assert all(torch.equal(a, b) for a, b in zip(
            torch.atleast_1d(lamina.compile(statistic, (x,))(x)), torch.atleast_1d(statistic(x))))


def test_a_bf16_scalar_broadcast_over_a_tensor_compiles():
    # Found by seed 1228 (bfloat16): the 0-d maximum of a vector, broadcast by ``minimum`` over a
    # (16, 16, 3) tensor, crashed the inlining rule that asks whether a producer is a plain copy:
    # the copy's source had no axes to compare.
    torch.manual_seed(1228)
    x0, x1 = torch.randn(3).to(torch.bfloat16), torch.randn(16, 16, 3).to(torch.bfloat16)

    def program(x0, x1):
        return torch.log(torch.minimum(x0.max(), x1).abs() + 1)

    actual = lamina.compile(program, (x0, x1))(x0, x1)
    torch.testing.assert_close(actual.double(), program(x0.double(), x1.double()), rtol=8e-3, atol=8e-3)

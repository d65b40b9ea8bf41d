"""Inputs with NaN and infinities planted, and the check that an output has eager's non-finite pattern."""

from __future__ import annotations

import torch

NAN, INF = float("nan"), float("inf")


def planted(shape: tuple[int, ...], dtype: torch.dtype, positions: dict[tuple[int, ...], float], seed: int = 0,
            device: str = "cpu") -> torch.Tensor:
    """Random normal values of ``shape`` with ``positions`` (index -> NaN or +-inf) set."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=generator)
    for at, value in positions.items():
        x[at] = value
    return x.to(dtype).to(device)


def assert_same_nonfinite(got: torch.Tensor, want: torch.Tensor, rtol: float | None = None,
                          atol: float | None = None) -> None:
    """``got`` has NaN exactly where ``want`` has, +inf and -inf exactly where it has them, and
    is close to it everywhere else (exactly equal for integer tensors, such as indices)."""
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    got, want = got.cpu(), want.cpu()
    if not want.is_floating_point():
        assert torch.equal(got, want), f"indices differ at {(got != want).nonzero().tolist()[:8]}"
        return
    for name, test in (("NaN", torch.isnan), ("+inf", torch.isposinf), ("-inf", torch.isneginf)):
        wrong = test(got) != test(want)
        assert not wrong.any(), (f"{name} where eager has none, or none where eager has one, at "
                                 f"{wrong.nonzero().tolist()[:8]}: got {got[wrong][:8].tolist()}, "
                                 f"eager {want[wrong][:8].tolist()}")
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)

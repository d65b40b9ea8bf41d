"""Comparing lamina's results with PyTorch's: same shapes and dtypes, values within a tolerance."""

from __future__ import annotations

from typing import Mapping, Sequence

import torch

#: Largest error relative to the largest magnitude of the expected result, or absolute below
#: magnitude 1: a mean or sum near zero differs from PyTorch's by rounding in another
#: order, which is small against its inputs, not against itself.
TOLERANCE = {"f64": 1e-10, "f32": 2e-5, "f16": 4e-3, "bf16": 3e-2}


def _short(dtype: torch.dtype) -> str:
    from lamina.core.ir import dtypes

    return dtypes.from_name(str(dtype).removeprefix("torch.")).short


def assert_close(actual: Sequence[torch.Tensor], expected: Sequence[torch.Tensor], where: str,
                 tolerance: Mapping[str, float] | None = None) -> None:
    """Raise AssertionError, saying which output differs and by how much."""
    tolerance = {**TOLERANCE, **(tolerance or {})}
    if len(actual) != len(expected):
        raise AssertionError(f"{where}: {len(actual)} result(s), PyTorch computes {len(expected)}")
    for k, (got, want) in enumerate(zip(actual, expected)):
        got = got.detach().cpu()
        label = f"{where}, result {k}"
        if tuple(got.shape) != tuple(want.shape) or got.dtype != want.dtype:
            raise AssertionError(f"{label}: lamina gives {got.dtype}{list(got.shape)}, PyTorch {want.dtype}{list(want.shape)}")
        if want.numel() == 0:
            continue
        if not want.dtype.is_floating_point:
            if not torch.equal(got, want):
                wrong = int((got != want).sum())
                raise AssertionError(f"{label}: {wrong} of {want.numel()} values differ from PyTorch")
            continue
        a, b = got.double(), want.double()
        if not torch.equal(torch.isnan(a), torch.isnan(b)):
            raise AssertionError(f"{label}: NaN where PyTorch has none, or the other way round")
        infinite = torch.isinf(b)
        if not torch.equal(a[infinite], b[infinite]) or bool(torch.isinf(a[~infinite]).any()):
            raise AssertionError(f"{label}: infinities differ from PyTorch's")
        finite = torch.isfinite(b)
        scale = max(float(b[finite].abs().max()), 1.0) if finite.any() else 1.0
        error = float((a[finite] - b[finite]).abs().max()) / scale if finite.any() else 0.0
        allowed = tolerance[_short(want.dtype)]
        if not error <= allowed:
            raise AssertionError(f"{label}: relative error {error:.3g} exceeds {allowed:g} for {want.dtype}")

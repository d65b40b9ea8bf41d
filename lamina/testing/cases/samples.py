"""Sample inputs of an op, written as data and made into fresh random tensors for each run.

``T((17, 33))`` is a tensor argument of the case's dtype; ``T((33, 17), layout="transposed")``
the same values reached through a transposed view, ``layout="sliced"`` through a strided
slice, so that the op also runs on non-contiguous inputs. Anything else in ``args`` or
``kwargs`` (numbers, lists of dims, dtypes) is passed as it is.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch

from lamina.core.ir import dtypes

LAYOUTS = ("contiguous", "transposed", "sliced")
VALUES = ("any", "positive", "nonzero", "unit", "index", "halves", "divisor")


@attrs.frozen
class T:
    """A tensor argument: its shape as the op sees it, how it is laid out, and what values it holds.

    ``values``: ``any`` (normal), ``positive`` (for log, sqrt), ``nonzero`` (divisors),
    ``unit`` (inside (-1, 1)), ``index`` (small non-negative integers), ``halves``
    (multiples of 0.5 in [-8, 8], where rounding ties and divisions come out exact),
    ``divisor`` (nonzero of either sign, multiples of 0.5 for floats). Integers of less than
    32 bits take every value of their type for ``any``, so that arithmetic wraps around.
    ``dtype``: a fixed short name, else the case's dtype.
    """

    shape: tuple[int, ...] = attrs.field(converter=tuple)
    layout: str = attrs.field(default="contiguous", validator=attrs.validators.in_(LAYOUTS))
    values: str = attrs.field(default="any", validator=attrs.validators.in_(VALUES))
    dtype: str | None = None

    def make(self, dtype: str) -> tuple[torch.Tensor, torch.Tensor]:
        """``(base, view)``: the tensor the program is given and the view the op reads."""
        torch_type = getattr(torch, dtypes.from_name(self.dtype or dtype).name)
        if self.layout == "transposed" and len(self.shape) >= 2:
            base = _values(self.shape[:-2] + (self.shape[-1], self.shape[-2]), self.values, torch_type)
            return base, base.transpose(-1, -2)
        if self.layout == "sliced" and self.shape:
            base = _values(self.shape[:-1] + (2 * self.shape[-1],), self.values, torch_type)
            return base, base[..., ::2]
        base = _values(self.shape, self.values, torch_type)
        return base, base


def _signs(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.where(torch.rand(shape) < 0.5, -1, 1)


def _integers(shape: tuple[int, ...], kind: str, dtype: torch.dtype) -> torch.Tensor:
    signed = dtype.is_signed
    if kind in ("positive", "nonzero"):
        return torch.randint(1, 6, shape, dtype=dtype)
    if kind == "index":
        return torch.randint(0, 4, shape, dtype=dtype)
    if kind == "divisor":
        magnitudes = torch.randint(1, 6, shape)
        return (magnitudes * _signs(shape) if signed else magnitudes).to(dtype)
    if kind == "any" and dtype.itemsize < 4:
        info = torch.iinfo(dtype)
        return torch.randint(info.min, info.max + 1, shape, dtype=dtype)
    return torch.randint(-5 if signed else 0, 6, shape, dtype=dtype)


def _values(shape: tuple[int, ...], kind: str, dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.rand(shape) < 0.5
    if not dtype.is_floating_point:
        return _integers(shape, kind, dtype)
    if kind == "halves":
        return (torch.randint(-16, 17, shape, dtype=torch.float64) / 2).to(dtype)
    if kind == "divisor":
        return (torch.randint(1, 9, shape, dtype=torch.float64) / 2 * _signs(shape)).to(dtype)
    if kind == "positive":
        values = torch.rand(shape, dtype=torch.float64) * 2 + 0.1
    elif kind == "nonzero":
        values = (torch.rand(shape, dtype=torch.float64) + 0.5) * torch.where(torch.rand(shape) < 0.5, -1.0, 1.0)
    elif kind == "unit":
        values = torch.rand(shape, dtype=torch.float64) * 1.8 - 0.9
    else:
        values = torch.randn(shape, dtype=torch.float64)
    return values.to(dtype)


@attrs.frozen
class Case:
    """One sample of an op: its name (part of the test id), arguments, and whether the
    (slower) compiled checks run it too."""

    name: str
    args: tuple[Any, ...] = attrs.field(converter=tuple)
    kwargs: dict[str, Any] = attrs.field(factory=dict)
    #: Run through the Kernel IR simulator (full compile) and on the GPU as well.
    compiled: bool = False
    #: Dtypes this case is limited to (short names); None: every dtype of the op.
    dtypes: tuple[str, ...] | None = None

    def tensors(self) -> list[T]:
        return [a for a in list(self.args) + list(self.kwargs.values()) if isinstance(a, T)]


def unary_cases(values: str = "any") -> list[Case]:
    """The standard samples of an elementwise op of one tensor: a ragged shape (also run
    through the whole compiler), size-1 axes, a 0-d tensor, a transposed and a sliced view.
    ``values`` restricts the inputs to an op's domain (``positive``, ``unit`` ...)."""
    return [
        Case("ragged", (T((17, 33), values=values),), compiled=True),
        Case("size_one", (T((1, 5, 1), values=values),)),
        Case("scalar", (T((), values=values),)),
        Case("transposed", (T((9, 12), "transposed", values),)),
        Case("sliced", (T((4, 7), "sliced", values),)),
    ]

"""tf32 values as the tensor cores see them: float32 with 10 of its 23 mantissa bits."""

from __future__ import annotations

import torch

DROPPED_BITS = 13


def truncated(values: torch.Tensor) -> torch.Tensor:
    """The tf32 part of float32 ``values``, what an mma reads of them: the low 13 mantissa bits cleared."""
    return (values.contiguous().view(torch.int32) & ~((1 << DROPPED_BITS) - 1)).view(torch.float32)


def rounded(values: torch.Tensor) -> torch.Tensor:
    """Float32 ``values`` rounded to the nearest tf32, ties away from zero, as ``Tf32`` says:
    half the dropped bits' weight added to the bits, then those bits cleared."""
    bits = values.contiguous().view(torch.int32)
    return ((bits + (1 << (DROPPED_BITS - 1))) & ~((1 << DROPPED_BITS) - 1)).view(torch.float32)

"""Cases for division modes, remainders and rounding, in the form of ``test_op_decompositions``'s
``CASES``: each op of ``lamina.plugins.ops.division`` appears in a captured graph."""

from __future__ import annotations

import torch

from lamina.frontends.torch import DEFAULT_KEEP
from tests.plugins.ops.lowering import Case

aten = torch.ops.aten

KEEP_DIVISIONS = DEFAULT_KEEP + (
    "aten.floor_divide.default", "aten.floor_divide.Scalar", "aten.div.Scalar_mode", "aten.remainder.Scalar",
    "aten.remainder.Scalar_Tensor", "aten.fmod.Scalar",
)
"""What export would write as ``div.Tensor_mode`` or with a Python number as a tensor, kept as it is."""


def divisions(x, y, i, j, u):
    floats = (torch.div(x, y, rounding_mode="trunc"), torch.div(x, y, rounding_mode="floor"), torch.div(x, y),
              aten.div.Scalar_mode(x, -1.5, rounding_mode="floor"), aten.div.Scalar_mode(x, 2, rounding_mode="trunc"),
              aten.floor_divide.default(x, y), aten.floor_divide.Scalar(x, 0.5), x % y, aten.remainder.Scalar(x, -2),
              aten.remainder.Scalar_Tensor(3, y), torch.fmod(x, y), aten.fmod.Scalar(x, 1.5))
    integers = (aten.floor_divide.default(i, j), torch.div(i, j, rounding_mode="trunc"), i % j, torch.fmod(i, j),
                aten.remainder.Scalar(i, -3), u // 3, u % (u // 2 + 1))
    rounding = (torch.floor(x), torch.ceil(x), torch.trunc(x), torch.round(x), torch.round(i), torch.floor(u))
    return floats + integers + rounding


def nonzero(*shape, dtype):
    return (torch.randint(1, 6, shape) * torch.where(torch.rand(shape) < 0.5, -1, 1)).to(dtype)


DIVISION_OP_CASES = [
    Case("divisions-and-rounding", divisions,
         lambda: (torch.randn(17, 33) * 4, torch.randn(33) + 3, torch.randint(-50, 51, (17, 33), dtype=torch.int8),
                  nonzero(17, 33, dtype=torch.int8), torch.randint(0, 256, (5, 7), dtype=torch.uint8)),
         keep=KEEP_DIVISIONS),
]

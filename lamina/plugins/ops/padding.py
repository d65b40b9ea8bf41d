"""``constant_pad_nd``: the input read where it lands, and a fill value around it (see ``TensorBuilder.pad``).

A value that does not fit an integer tensor is truncated, as PyTorch does (2.5 pads
an int64 tensor with 2); an infinite one cannot be, and is an error as in PyTorch.
"""

from __future__ import annotations

import math

from lamina.core.ir.tensor_builder import TensorBuilder
from lamina.core.ir.torch_ir import Node
from lamina.plugins.ops.arguments import argument, tensor


def decompose_constant_pad_nd(b: TensorBuilder, node: Node) -> str:
    x = tensor(b, node)
    value = argument(node, 2, "value", 0)
    if not b.dtype(x).is_float and not math.isfinite(value):
        raise b.fail(f"cannot pad the {b.dtype(x).name} tensor {x} with {value}; pad with a finite value")
    return b.pad(x, argument(node, 1, "pad"), value)


DECOMPOSITIONS = {
    "aten.constant_pad_nd.default": decompose_constant_pad_nd,
}

"""Padding with a constant: ``constant_pad_nd``, and ``pad``, which convolution and pooling read their
borders through.

The input is read where the output lands on it, with the index clamped into the input so
that no read falls outside it, and a ``where`` on the output coordinates puts the fill
value in the border. A value that does not fit an integer tensor is truncated, as
PyTorch does (2.5 pads an int64 tensor with 2); an infinite one cannot be, and is an
error as in PyTorch.
"""

from __future__ import annotations

import math
from typing import Sequence

from lamina.core.ir import expr as ex, sizes, tensor_ir
from lamina.core.ir.sizes import Size
from lamina.core.ir.tensor_builder import Scalar, TensorBuilder
from lamina.core.ir.tensor_ir import Arg, Coord
from lamina.core.ir.torch_ir import Node
from lamina.plugins.ops.arguments import argument, tensor


def pad(b: TensorBuilder, name: str, pads: Sequence[Size], value: Scalar) -> str:
    """``F.pad(x, pads, value=value)``: ``pads`` pairs (before, after) from the last axis back; negative crops.
    Only axes that grow need the clamp and the ``where``; a pad known only at run time (SDPA's mask
    padded to a multiple of 8 keys) gets both, which crop as well as they pad."""
    src = b.shape(name)
    if len(pads) % 2 or len(pads) // 2 > len(src):
        raise b.fail(f"padding {list(pads)} needs one (before, after) pair per axis, at most {len(src)} pairs")
    if not any(sizes.is_symbolic(p) or p for p in pads):
        return name
    before, after = [0] * len(src), [0] * len(src)
    for k in range(len(pads) // 2):
        before[-1 - k], after[-1 - k] = pads[2 * k], pads[2 * k + 1]
    shape = [sizes.size(size + lo + hi) for size, lo, hi in zip(src, before, after)]
    if any(not sizes.is_symbolic(s) and s < 0 for s in shape):
        raise b.fail(f"padding {list(pads)} leaves {name} of shape {list(src)} with a negative size {shape}")
    if 0 in src and 0 not in shape:
        return b.full(value, shape, b.dtype(name), role="pad")
    d = tensor_ir.output_vars(len(src))
    index, inside = [], []
    for axis, (size, lo, hi) in enumerate(zip(src, before, after)):
        read = d[axis] - lo
        if sizes.is_symbolic(lo) or lo > 0:
            read = ex.op("max", read, 0)
            inside.append(ex.op("ge", Coord(axis), lo))
        if sizes.is_symbolic(hi) or hi > 0:
            read = ex.op("min", read, size - 1)
            inside.append(ex.op("lt", Coord(axis), lo + size))
        index.append(read)
    read = b.index_map(name, index, shape, role="padded")
    if not inside:
        return read
    dtype = b.dtype(name)
    condition = inside[0]
    for also in inside[1:]:
        condition = ex.op("and", condition, also)
    return b.elementwise(ex.op("where", condition, Arg(0, dtype), ex.cast(ex.const(value), dtype)), [read], role="pad")


def decompose_constant_pad_nd(b: TensorBuilder, node: Node) -> str:
    x = tensor(b, node)
    value = argument(node, 2, "value", 0)
    if not b.dtype(x).is_float and not math.isfinite(value):
        raise b.fail(f"cannot pad the {b.dtype(x).name} tensor {x} with {value}; pad with a finite value")
    return pad(b, x, argument(node, 1, "pad"), value)


DECOMPOSITIONS = {
    "aten.constant_pad_nd.default": decompose_constant_pad_nd,
}

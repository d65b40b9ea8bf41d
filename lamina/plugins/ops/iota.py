"""Functions of position: ``arange`` is its output coordinate, ``cumsum`` a sum over a triangle of them.

``cumsum`` builds an (n, n) pairing along its axis and sums the pairs at or before each
position: quadratic work, which suits the short shape-only subgraphs (such as the
positions of a causal mask) that need it, and which constant folding usually removes.
"""

from __future__ import annotations

import math

from lamina.core.ir import sizes
from lamina.core.ir.tensor_builder import TensorBuilder
from lamina.core.ir.torch_ir import Node
from lamina.plugins.ops.arguments import argument, tensor


def _arange(b: TensorBuilder, node: Node, start, end, step) -> str:
    if sizes.is_symbolic(start) or sizes.is_symbolic(end):  # bounds known only at run time: Dynamo's count
        size = node.type.shape[0]
    else:
        size = max(0, math.ceil((end - start) / step))
    return b.arange(start, step, size, node.type.dtype)


def decompose_arange(b: TensorBuilder, node: Node) -> str:
    return _arange(b, node, 0, argument(node, 0, "end"), 1)


def decompose_arange_start(b: TensorBuilder, node: Node) -> str:
    return _arange(b, node, argument(node, 0, "start"), argument(node, 1, "end"), 1)


def decompose_arange_start_step(b: TensorBuilder, node: Node) -> str:
    return _arange(b, node, argument(node, 0, "start"), argument(node, 1, "end"), argument(node, 2, "step", 1))


def decompose_cumsum(b: TensorBuilder, node: Node) -> str:
    return b.cumsum(tensor(b, node), argument(node, 1, "dim"), node.kwarg("dtype"))


DECOMPOSITIONS = {
    "aten.arange.default": decompose_arange,
    "aten.arange.start": decompose_arange_start,
    "aten.arange.start_step": decompose_arange_start_step,
    "aten.cumsum.default": decompose_cumsum,
}

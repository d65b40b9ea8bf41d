"""``torch.cat``: each part is read where it lands, then the coordinate along the axis picks one."""

from __future__ import annotations

from lamina.core.ir.tensor_builder import TensorBuilder
from lamina.core.ir.torch_ir import Node
from lamina.plugins.ops.arguments import argument


def decompose_cat(b: TensorBuilder, node: Node) -> str:
    parts = [b.value(t) for t in argument(node, 0, "tensors")]
    return b.concat(parts, argument(node, 1, "dim", 0))


def decompose_stack(b: TensorBuilder, node: Node) -> str:
    """``torch.stack``: every part gains the new axis, then they are concatenated along it."""
    parts = [b.value(t) for t in argument(node, 0, "tensors")]
    dim = b.axis(argument(node, 1, "dim", 0), len(b.shape(parts[0])) + 1)
    return b.concat([b.unsqueeze(p, dim) for p in parts], dim)


DECOMPOSITIONS = {
    "aten.cat.default": decompose_cat,
    "aten.stack.default": decompose_stack,
}

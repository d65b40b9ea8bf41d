"""Reading a Torch IR node's arguments as its ATen schema names them."""

from __future__ import annotations

from typing import Any

from lamina.core.ir.tensor_builder import Operand, TensorBuilder
from lamina.core.ir.torch_ir import Node, Ref


def argument(node: Node, position: int, name: str, default: Any = None) -> Any:
    """The argument at ``position``, or passed by keyword as ``name``, or ``default``."""
    if len(node.args) > position:
        return node.args[position]
    return node.kwarg(name, default)


def operand(b: TensorBuilder, value: Any) -> Operand:
    """A tensor argument as the Tensor IR value that holds it; a number as it is."""
    return b.value(value) if isinstance(value, Ref) else value


def tensor(b: TensorBuilder, node: Node, position: int = 0, name: str = "self") -> str:
    """The tensor argument at ``position``."""
    return b.value(argument(node, position, name))

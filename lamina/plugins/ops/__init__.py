"""The built-in decompositions of ATen ops into Tensor IR primitives, one module per op family."""

from lamina.plugins.ops.plugin import DECOMPOSITIONS

__all__ = ["DECOMPOSITIONS"]

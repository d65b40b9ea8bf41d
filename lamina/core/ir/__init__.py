"""The IR levels, one module each, with the expressions and dtypes they share."""

from lamina.core.ir import dtypes, expr, index, kernel_ir, loop_ir, tensor_ir, tile_ir, torch_ir

__all__ = ["dtypes", "expr", "index", "torch_ir", "tensor_ir", "loop_ir", "tile_ir", "kernel_ir"]

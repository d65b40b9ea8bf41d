"""Dynamo's symbolic sizes (``torch.SymInt``) as lamina's (``lamina.core.ir.sizes``).

A graph that Dynamo traced with dynamic dimensions carries sizes such as ``s77`` and
``s27*s77 - 1`` (sympy expressions over symbols named by their source). While a graph is
read (``naming``), each symbol becomes ``s0``, ``s1``, ... in the order the graph's
placeholders first use it, and each size an index expression of those symbols. A size that
is not a sum of products of symbols and numbers (a size computed from tensor data) is an
error.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator

import torch

from lamina.core.errors import LaminaError, SymbolicSizeError
from lamina.core.ir import sizes
from lamina.core.ir.sizes import Size

SYMBOLIC_NUMBERS = (torch.SymInt, torch.SymFloat, torch.SymBool)
"""What Dynamo computes from sizes: an int is a size lamina takes; a float or a bool (a scale
``1 / sqrt(s2)``, a test of a size) it does not take yet."""

_NAMES: contextvars.ContextVar[dict | None] = contextvars.ContextVar("lamina_symbol_names", default=None)


@contextlib.contextmanager
def naming(graph_module: torch.fx.GraphModule) -> Iterator[dict]:
    """While reading ``graph_module``: its symbols, named in the order its placeholders use them."""
    names: dict = {}
    for node in graph_module.graph.nodes:
        if node.op != "placeholder":
            continue
        value = node.meta.get("val")
        found = [value] if isinstance(value, torch.SymInt) else list(getattr(value, "shape", ()))
        for size in found:
            if isinstance(size, torch.SymInt):
                for sym in sorted(size.node.expr.free_symbols, key=str):
                    names.setdefault(sym, sizes.symbol(len(names)))
    token = _NAMES.set(names)
    try:
        yield names
    finally:
        _NAMES.reset(token)


def reading_symbols() -> bool:
    return _NAMES.get() is not None


def size_of(value: int | torch.SymInt, where: str) -> Size:
    """``value`` as a lamina size: an int, or an expression of the graph's symbols."""
    if isinstance(value, int):
        return value
    if isinstance(value, (torch.SymFloat, torch.SymBool)):
        raise SymbolicSizeError(f"{where} takes {value.node.expr}, a number computed from sizes known only at "
                                "run time, which lamina takes only as a size")
    expr = value.node.expr
    if expr.is_number:
        return int(expr)
    names = _NAMES.get()
    if names is None:
        raise LaminaError(f"{where} has the symbolic size {expr}; lamina compiles this program for concrete sizes")
    return sizes.size(_converted(expr, names, where))


def _converted(expr, names: dict, where: str):
    import sympy
    from torch.utils._sympy.functions import FloorDiv, Mod, PythonMod

    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        if expr not in names:
            raise LaminaError(f"{where} has a size of {expr}, which no input of the graph gives (a symbolic shape "
                              "computed from tensor data, as nonzero's is); lamina compiles programs whose sizes "
                              "follow from their inputs' shapes")
        return names[expr]
    args = [_converted(a, names, where) for a in expr.args]
    if isinstance(expr, sympy.Add):
        return sum(args[1:], args[0])
    if isinstance(expr, sympy.Mul):
        result = args[0]
        for a in args[1:]:
            result = result * a
        return result
    if isinstance(expr, FloorDiv):
        return args[0] // args[1]
    if isinstance(expr, (Mod, PythonMod)):
        return args[0] % args[1]
    raise LaminaError(f"{where} has the size {expr}, which lamina cannot compute at run time "
                      f"({type(expr).__name__}); lamina compiles this program for concrete sizes")

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
from lamina.core.ir import expr as ex, sizes
from lamina.core.ir.sizes import Size

SYMBOLIC_NUMBERS = (torch.SymInt, torch.SymFloat, torch.SymBool)
"""What Dynamo computes from sizes: an int is a size lamina takes; a float or a bool (a scale
``1 / sqrt(s2)``, a test of a size) it does not take yet."""

_NAMES: contextvars.ContextVar[dict | None] = contextvars.ContextVar("lamina_symbol_names", default=None)


@contextlib.contextmanager
def naming(graph_module: torch.fx.GraphModule) -> Iterator[dict]:
    """While reading ``graph_module``: its symbols, named in the order its placeholders use them;
    a symbol that an attention op needs equal to another's size (``equal_sizes``) is that size."""
    names: dict = {}
    count = 0
    same = equal_sizes(graph_module)
    for node in graph_module.graph.nodes:
        if node.op != "placeholder":
            continue
        value = node.meta.get("val")
        found = [value] if isinstance(value, torch.SymInt) else list(getattr(value, "shape", ()))
        for size in found:
            if isinstance(size, torch.SymInt):
                for sym in sorted(size.node.expr.free_symbols, key=str):
                    if sym in names:
                        continue
                    name, count = sizes.symbol(count), count + 1
                    offsets = same.get(sym, {sym: 0})
                    names.update((member, name + (offset - offsets[sym]) if offset != offsets[sym] else name)
                                 for member, offset in offsets.items())
    token = _NAMES.set(names)
    try:
        yield names
    finally:
        _NAMES.reset(token)


def equal_sizes(graph_module: torch.fx.GraphModule) -> dict:
    """For each symbol that an attention op of the graph needs equal to another size: every symbol
    it is tied to, with its offset (``{s1: 0, s2: 1}``: ``s2 = s1 + 1``).

    The fused attention kernels of CUDA (``_scaled_dot_product_cudnn_attention`` and its kin)
    check no shapes when Dynamo traces them, so the decoding step of a growing cache may hold
    the keys' length, the values' and the mask's as distinct symbols (``s1 + 1``, ``s2 + 1``,
    ``s3``) that are equal at every call. lamina takes them as one size: the program's inputs then
    have one symbol where Dynamo has three, and a call whose tensors disagree is refused where
    its sizes are bound (``sizes.bind``), never computed wrong."""
    parent: dict = {}  # symbol -> (another, offset): the symbol is the other plus the offset

    def root(sym):
        if sym not in parent:
            return sym, 0
        above, offset = parent[sym]
        top, more = root(above)
        parent[sym] = (top, offset + more)
        return top, offset + more

    for node in graph_module.graph.nodes:
        if node.op != "call_function" or "scaled_dot_product" not in str(node.target):
            continue
        q, k, v, mask = (_shape(a) for a in (list(node.args[:4]) + [None] * 4)[:4])
        pairs = [(k[-2], v[-2]), (q[-1], k[-1])] if q and k and v else []
        if mask and k and q and len(mask) >= 2:
            pairs += [(mask[-1], k[-2]), (mask[-2], q[-2])]
        for a, b in pairs:
            tied = _tied(a, b)
            if tied is not None:
                x, y, offset = tied  # x = y + offset
                (top_x, off_x), (top_y, off_y) = root(x), root(y)
                if top_x != top_y:
                    parent[top_x] = (top_y, off_y + offset - off_x)
    classes: dict = {}
    for sym in list(parent):
        top, offset = root(sym)
        classes.setdefault(top, {top: 0})[sym] = offset
    return {sym: members for members in classes.values() for sym in members}


def _shape(arg) -> tuple | None:
    value = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
    return tuple(value.shape) if isinstance(value, torch.Tensor) else None


def _tied(a, b) -> tuple | None:
    """``(x, y, offset)`` where sizes ``a`` and ``b`` differ only in their symbols, ``a - b`` being
    ``x - y - offset`` (so that ``x = y + offset`` makes them equal); else None (a size of 1 that
    broadcasts, equal sizes, or any other difference)."""
    if not (isinstance(a, torch.SymInt) and isinstance(b, torch.SymInt)):
        return None
    difference = (a.node.expr - b.node.expr).expand()
    symbols = sorted(difference.free_symbols, key=str)
    if len(symbols) != 2:
        return None
    x, y = symbols
    constant = difference.subs({x: 0, y: 0})
    if not constant.is_Integer or {difference.coeff(x), difference.coeff(y)} != {1, -1}:
        return None
    if difference.coeff(x) == 1:  # x - y + c = 0
        return x, y, -int(constant)
    return y, x, -int(constant)  # y - x + c = 0


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
    from torch.utils._sympy.functions import FloorDiv, Max, Min, Mod, PythonMod

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
    if isinstance(expr, (Max, Min, sympy.Max, sympy.Min)):  # a window's length, clamped at 0
        name = "max" if isinstance(expr, (Max, sympy.Max)) else "min"
        result = args[0]
        for a in args[1:]:
            result = ex.op(name, ex.const(result), ex.const(a))
        return result
    raise LaminaError(f"{where} has the size {expr}, which lamina cannot compute at run time "
                      f"({type(expr).__name__}); lamina compiles this program for concrete sizes")

"""Scalar expressions: the one expression language of every level below Torch IR.

An expression is a tree of ``Const``, ``Var`` and ``Op`` nodes, plus the leaves a
level adds of its own (an ``Arg`` of an Elementwise function, a ``Load`` from a
buffer). The set of operators is closed and listed in ``OPS``: it is the surface
that backends must implement, so a new op is added here, never in a plugin.

Integer expressions built with the Python operators (``i * 64 + k``) are simplified
as they are built, by the simplifier of ``lamina.core.ir.index``: that module builds on
this one and hands its simplifier over when it is imported (``set_operator_simplifier``),
so that this one never imports it back.
"""

from __future__ import annotations

import math
from typing import Callable, Iterator

import attrs

from lamina.core.errors import SymbolicSizeError
from lamina.core.ir import dtypes
from lamina.core.ir.dtypes import DType


@attrs.frozen
class OpInfo:
    """What an operator is: its arity and how its result type follows from its operands."""

    name: str
    arity: int
    kind: str  # "arith", "math", "compare", "logic", "select", "cast", "int"


_OPS = [
    OpInfo("add", 2, "arith"),
    OpInfo("sub", 2, "arith"),
    OpInfo("mul", 2, "arith"),
    OpInfo("div", 2, "arith"),
    OpInfo("max", 2, "arith"),
    OpInfo("min", 2, "arith"),
    OpInfo("pow", 2, "arith"),
    OpInfo("neg", 1, "arith"),
    OpInfo("abs", 1, "arith"),
    OpInfo("floordiv", 2, "int"),
    OpInfo("mod", 2, "int"),
    # Division and rounding of data, of any sign: ``truncdiv`` rounds the quotient towards
    # zero (C's integer ``/``), ``fmod`` is the remainder of that division (C's ``%``, the
    # dividend's sign). ``floordiv`` and ``mod`` above are index arithmetic on non-negative values.
    OpInfo("truncdiv", 2, "arith"),
    OpInfo("fmod", 2, "arith"),
    OpInfo("floor", 1, "arith"),
    OpInfo("ceil", 1, "arith"),
    OpInfo("trunc", 1, "arith"),
    OpInfo("round", 1, "arith"),  # half to even, as torch.round
    OpInfo("exp", 1, "math"),
    OpInfo("exp2", 1, "math"),  # 2 ** x, the attention kernels' softmax; float32 on the GPU: ex2.approx.ftz
    OpInfo("log", 1, "math"),
    OpInfo("sqrt", 1, "math"),
    OpInfo("rsqrt", 1, "math"),
    OpInfo("reciprocal", 1, "math"),
    OpInfo("tanh", 1, "math"),
    OpInfo("sigmoid", 1, "math"),
    OpInfo("sin", 1, "math"),
    OpInfo("cos", 1, "math"),
    OpInfo("erf", 1, "math"),
    OpInfo("lt", 2, "compare"),
    OpInfo("le", 2, "compare"),
    OpInfo("gt", 2, "compare"),
    OpInfo("ge", 2, "compare"),
    OpInfo("eq", 2, "compare"),
    OpInfo("ne", 2, "compare"),
    OpInfo("and", 2, "logic"),
    OpInfo("or", 2, "logic"),
    OpInfo("not", 1, "logic"),
    OpInfo("where", 3, "select"),
    OpInfo("cast", 1, "cast"),
]

#: Every operator an expression may use, by name.
OPS: dict[str, OpInfo] = {info.name: info for info in _OPS}


class Expr:
    """Base class of expression nodes. Subclasses are frozen attrs classes with a ``dtype``."""

    dtype: DType

    def children(self) -> tuple["Expr", ...]:
        return ()

    def rebuild(self, children: tuple["Expr", ...]) -> "Expr":
        return self

    # Integer index arithmetic reads naturally with operators; see set_operator_simplifier.
    def __add__(self, other): return _index_op("add", self, other)
    def __radd__(self, other): return _index_op("add", other, self)
    def __sub__(self, other): return _index_op("sub", self, other)
    def __rsub__(self, other): return _index_op("sub", other, self)
    def __mul__(self, other): return _index_op("mul", self, other)
    def __rmul__(self, other): return _index_op("mul", other, self)
    def __floordiv__(self, other): return _index_op("floordiv", self, other)
    def __rfloordiv__(self, other): return _index_op("floordiv", other, self)
    def __mod__(self, other): return _index_op("mod", self, other)
    def __rmod__(self, other): return _index_op("mod", other, self)
    def __neg__(self): return _index_op("mul", self, -1)

    def __str__(self) -> str:
        return format_expr(self)

    # A size known only at run time (``s0 + 1``) is an expression: code that asks for its
    # number, or compares it with another, cannot go on with it (``lamina.core.ir.sizes``).
    def __lt__(self, other): _needs_a_number(self)
    def __le__(self, other): _needs_a_number(self)
    def __gt__(self, other): _needs_a_number(self)
    def __ge__(self, other): _needs_a_number(self)
    def __index__(self): _needs_a_number(self)
    def __int__(self): _needs_a_number(self)
    def __float__(self): _needs_a_number(self)
    def __truediv__(self, other): _needs_a_number(self)
    def __rtruediv__(self, other): _needs_a_number(self)


def _needs_a_number(e: Expr):
    raise SymbolicSizeError(f"a number is needed where the size {format_expr(e)} is known only at run time")


@attrs.frozen(eq=True, cache_hash=True)
class Const(Expr):
    value: int | float | bool
    dtype: DType = attrs.field(default=dtypes.index)


@attrs.frozen(eq=True, cache_hash=True)
class Var(Expr):
    """A named scalar: a loop variable, an accumulator, a local."""

    name: str
    dtype: DType = attrs.field(default=dtypes.index)


@attrs.frozen(eq=True, cache_hash=True)
class Op(Expr):
    op: str
    args: tuple[Expr, ...]
    dtype: DType

    def children(self):
        return self.args

    def rebuild(self, children):
        return attrs.evolve(self, args=tuple(children))


def const(value, dtype: DType | None = None) -> Expr:
    """``value`` as a constant; a size known only at run time (an expression already) as itself."""
    if isinstance(value, Expr):
        return value
    if dtype is None:
        if isinstance(value, bool):
            dtype = dtypes.bool_
        elif isinstance(value, int):
            dtype = dtypes.index
        else:
            dtype = dtypes.float32
    return Const(value, dtype)


def _as_expr(x, like: DType | None = None) -> Expr:
    if isinstance(x, Expr):
        return x
    if like is not None and like.is_float and not isinstance(x, bool):
        return Const(float(x), like)
    return const(x)


def result_dtype(name: str, args: tuple[Expr, ...], dtype: DType | None = None) -> DType:
    info = OPS[name]
    if info.kind == "cast":
        if dtype is None:
            raise ValueError("cast needs a target dtype")
        return dtype
    if info.kind in ("compare", "logic"):
        return dtypes.bool_
    if info.kind == "select":
        return dtypes.promote(args[1].dtype, args[2].dtype)
    if info.kind == "math":
        d = args[0].dtype
        return d if d.is_float else dtypes.float32
    result = args[0].dtype
    for a in args[1:]:
        result = dtypes.promote(result, a.dtype)
    if name == "div" and not result.is_float:
        return dtypes.float32
    return result


def op(name: str, *args, dtype: DType | None = None) -> Op:
    """Build an ``Op``, checking the operator and inferring the result type.

    Python numbers among ``args`` become constants of the other operands' type.
    """
    if name not in OPS:
        raise ValueError(f"unknown scalar op {name!r}; known: {', '.join(OPS)}")
    info = OPS[name]
    if len(args) != info.arity:
        raise ValueError(f"op {name} takes {info.arity} operand(s), got {len(args)}")
    like = next((a.dtype for a in args if isinstance(a, Expr)), None)
    exprs = tuple(_as_expr(a, like) for a in args)
    return Op(name, exprs, result_dtype(name, exprs, dtype))


_OPPOSITE = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt"}


def negated(condition: Expr) -> Expr:
    """``not condition``, written as the opposite comparison where it compares integers."""
    if isinstance(condition, Op) and condition.op in _OPPOSITE and not any(a.dtype.is_float for a in condition.args):
        return op(_OPPOSITE[condition.op], *condition.args)
    if isinstance(condition, Op) and condition.op == "not":
        return condition.args[0]
    return op("not", condition)


def cast(x: Expr, dtype: DType) -> Expr:
    if x.dtype == dtype:
        return x
    if isinstance(x, Const):
        return Const(_convert(x.value, dtype), dtype)
    return Op("cast", (x,), dtype)


def _convert(value, dtype: DType):
    """``value`` as a constant of ``dtype``; an integer out of its range wraps around, as in PyTorch."""
    if dtype == dtypes.bool_:
        return bool(value)
    if dtype.is_float:
        return float(value)
    return dtypes.wrap(int(value), dtype)


_operator_simplifier: Callable[[Expr], Expr] | None = None


def set_operator_simplifier(simplify: Callable[[Expr], Expr]) -> None:
    """Make ``simplify`` what the Python operators apply to the expression they build.

    ``lamina.core.ir.index`` gives its ``simplify`` when it is imported, and ``lamina.core.ir``
    imports it with this module, so no expression is built before it is set.
    """
    global _operator_simplifier
    _operator_simplifier = simplify


def _index_op(name, a, b):
    return _operator_simplifier(op(name, a, b))


# --- traversal ---------------------------------------------------------------

def walk(expr: Expr) -> Iterator[Expr]:
    """Every node of ``expr``, parents before children, left to right. A stack rather than nested
    generators: each node of a deep expression would otherwise pass through one generator per level
    above it, and the fusion rules walk every kernel of a model many times."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        children = node.children()
        if children:
            stack.extend(reversed(children))


def transform(expr: Expr, fn: Callable[[Expr], Expr | None]) -> Expr:
    """Rebuild ``expr`` bottom-up; ``fn`` returns a replacement for a node, or None to keep it."""
    children = expr.children()
    if children:
        new_children = tuple(transform(c, fn) for c in children)
        if new_children != children:
            expr = expr.rebuild(new_children)
    replaced = fn(expr)
    return expr if replaced is None else replaced


def substitute(expr: Expr, mapping: dict[str, Expr]) -> Expr:
    """Replace variables by name."""
    return transform(expr, lambda e: mapping.get(e.name) if isinstance(e, Var) else None)


def free_vars(expr: Expr) -> set[str]:
    return {e.name for e in walk(expr) if isinstance(e, Var)}


# --- printing ----------------------------------------------------------------

_INFIX = {
    "add": ("+", 4), "sub": ("-", 4), "mul": ("*", 5), "div": ("/", 5),
    "floordiv": ("//", 5), "mod": ("%", 5),
    "lt": ("<", 3), "le": ("<=", 3), "gt": (">", 3), "ge": (">=", 3),
    "eq": ("==", 3), "ne": ("!=", 3), "and": ("and", 2), "or": ("or", 1),
}


def format_const(c: Const) -> str:
    v = c.value
    if c.dtype == dtypes.bool_:
        return "true" if v else "false"
    if c.dtype.is_float:
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        if math.isnan(v):
            return "nan"
        return repr(float(v))
    return str(int(v))


def format_expr(expr: Expr, leaf: Callable[[Expr], str | None] | None = None) -> str:
    """Print an expression as a person would write it: ``(x[i, k] + bias[k]) * w[k, j]``.

    ``leaf`` prints level-specific nodes (loads and the like); it returns None for
    nodes it does not know.
    """
    return _fmt(expr, leaf, 0)


def _fmt(e: Expr, leaf, parent_prec: int) -> str:
    if leaf is not None:
        text = leaf(e)
        if text is not None:
            return text
    if isinstance(e, Const):
        return format_const(e)
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Op):
        if e.op in _INFIX:
            sym, prec = _INFIX[e.op]
            lhs = _fmt(e.args[0], leaf, prec)
            rhs = _fmt(e.args[1], leaf, prec + 1)
            text = f"{lhs} {sym} {rhs}"
            return f"({text})" if prec < parent_prec else text
        if e.op == "neg":
            return f"-{_fmt(e.args[0], leaf, 6)}"
        if e.op == "not":
            return f"not {_fmt(e.args[0], leaf, 6)}"
        if e.op == "cast":
            return f"{e.dtype.short}({_fmt(e.args[0], leaf, 0)})"
        inner = ", ".join(_fmt(a, leaf, 0) for a in e.args)
        return f"{e.op}({inner})"
    return repr(e)

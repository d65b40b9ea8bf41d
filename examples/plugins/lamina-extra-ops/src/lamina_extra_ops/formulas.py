"""Numerically stable scalar formulas, written with lamina's scalar operators only.

lamina's expression language has ``log`` and ``exp`` but no ``log1p``; the
formulas below never overflow and keep full relative precision where the naive
``log(1 + exp(x))`` would round ``1 + tiny`` to 1.
"""

from __future__ import annotations

import math

from lamina.core.ir import expr as ex
from lamina.core.ir.expr import Expr


def log1p(x: Expr) -> Expr:
    """``log(1 + x)`` accurate for tiny ``x``: ``log(u) * x / (u - 1)`` with ``u = 1 + x`` (Kahan's trick).

    Where ``u`` rounds to 1 the answer is ``x`` itself; at ``x = inf`` it is ``inf``.
    """
    u = ex.op("add", x, 1.0)
    scaled = ex.op("div", ex.op("mul", ex.op("log", u), x), ex.op("sub", u, 1.0))
    finite = ex.op("where", ex.op("eq", u, math.inf), u, scaled)
    return ex.op("where", ex.op("eq", u, 1.0), x, finite)


def softplus(x: Expr) -> Expr:
    """``log(1 + exp(x))`` as ``max(x, 0) + log1p(exp(-|x|))``: ``exp`` never sees a positive number."""
    return ex.op("add", ex.op("max", x, 0.0), log1p(ex.op("exp", ex.op("neg", ex.op("abs", x)))))


def logaddexp(a: Expr, b: Expr) -> Expr:
    """``log(exp(a) + exp(b))`` as ``max(a, b) + log1p(exp(-|a - b|))``.

    Equal operands take the difference 0, so that two infinities of one sign give
    that infinity instead of ``inf - inf = nan``.
    """
    gap = ex.op("where", ex.op("eq", a, b), 0.0, ex.op("neg", ex.op("abs", ex.op("sub", a, b))))
    return ex.op("add", ex.op("max", a, b), log1p(ex.op("exp", gap)))


def mish(x: Expr) -> Expr:
    """``x * tanh(softplus(x))``."""
    return ex.op("mul", x, ex.op("tanh", softplus(x)))


def hardswish(x: Expr) -> Expr:
    """``x * min(max(x + 3, 0), 6) / 6``, in PyTorch's order of operations."""
    gate = ex.op("min", ex.op("max", ex.op("add", x, 3.0), 0.0), 6.0)
    return ex.op("div", ex.op("mul", x, gate), 6.0)

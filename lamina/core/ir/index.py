"""Integer index expressions: simplification and affine analysis.

Index expressions are ordinary expressions (``lamina.core.ir.expr``) of integer type.
They are kept in a canonical affine form: a sum of ``coefficient * atom`` plus a
constant, where an atom is a variable or a ``//`` / ``%`` that could not be removed.
``simplify`` uses the ranges of loop variables (0 <= v < extent) to drop divisions
and remainders that cannot matter, so that views of views print as people expect:
``(i * 16 + j) // 16`` becomes ``i`` when ``j < 16``. Importing this module makes
``simplify`` what the Python operators on expressions apply (``i * 64 + k``).
"""

from __future__ import annotations

import functools
from typing import Mapping

from lamina.core.ir import dtypes
from lamina.core.ir.expr import Const, Expr, Op, Var, const, op, set_operator_simplifier

Ranges = Mapping[str, "int | Expr"]
"""Extents of variables: ``{"i": 16}`` means 0 <= i < 16. An extent known only at run time
(``s0``) bounds nothing here."""

_NO_RANGES: dict[str, int] = {}


class Affine:
    """``sum(coef * atom) + constant``, with atoms in order of first appearance."""

    __slots__ = ("terms", "constant")

    def __init__(self, terms: dict[Expr, int] | None = None, constant: int = 0):
        self.terms = {a: c for a, c in (terms or {}).items() if c != 0}
        self.constant = constant

    def plus(self, other: "Affine", sign: int = 1) -> "Affine":
        terms = dict(self.terms)
        for atom, coef in other.terms.items():
            terms[atom] = terms.get(atom, 0) + sign * coef
        return _recombine_divisions(Affine(terms, self.constant + sign * other.constant))

    def scaled(self, k: int) -> "Affine":
        return Affine({a: c * k for a, c in self.terms.items()}, self.constant * k)

    def is_constant(self) -> bool:
        return not self.terms

    def to_expr(self) -> Expr:
        """The expression, its terms in order of first appearance, except that terms of symbols
        alone (sizes known only at run time: ``s2 + s0``) come last, by name, so that one size
        has one expression however it was built."""
        result: Expr | None = None
        for atom, coef in sorted(self.terms.items(), key=_size_terms_last):
            term = atom if abs(coef) == 1 else Op("mul", (atom, const(abs(coef))), dtypes.index)
            if result is None:
                result = term if coef > 0 else Op("neg", (term,), dtypes.index)
            else:
                result = Op("add" if coef > 0 else "sub", (result, term), dtypes.index)
        if result is None:
            return const(self.constant)
        if self.constant:
            name = "add" if self.constant > 0 else "sub"
            result = Op(name, (result, const(abs(self.constant))), dtypes.index)
        return result


def is_symbol_name(name: str) -> bool:
    """Whether ``name`` is a size known only at run time: ``s0``, ``s1``, ... (``lamina.core.ir.sizes``)."""
    return name[:1] == "s" and name[1:].isdigit()


def _size_terms_last(term: tuple[Expr, int]) -> tuple[int, str]:
    atom = term[0]
    names = [v.name for v in _vars(atom)]
    if names and all(is_symbol_name(n) for n in names):
        return 1, str(atom)
    return 0, ""


def _recombine_divisions(a: Affine) -> Affine:
    """``(x // d) * d * c + (x % d) * c`` is ``x * c``: views of views fold back to plain coordinates
    (``x // a // d`` written ``x // (a * d)``, as ``affine`` writes it: a convolution's window
    ``r // 9 * 9 + r // 3 % 3 * 3 + r % 3`` is ``r``)."""
    for atom, coef in list(a.terms.items()):
        if not (isinstance(atom, Op) and atom.op == "mod" and isinstance(atom.args[1], Const)):
            continue
        x, d = atom.args[0], int(atom.args[1].value)
        quotient = Op("floordiv", (x, atom.args[1]), dtypes.index)
        if isinstance(x, Op) and x.op == "floordiv" and isinstance(x.args[1], Const):
            quotient = Op("floordiv", (x.args[0], const(int(x.args[1].value) * d)), dtypes.index)
        if a.terms.get(quotient) == coef * d and atom in a.terms:
            terms = {t: c for t, c in a.terms.items() if t not in (atom, quotient)}
            return _recombine_divisions(Affine(terms, a.constant).plus(affine(x).scaled(coef)))
    return a


def _is_int(e: Expr) -> bool:
    return not e.dtype.is_float and e.dtype != dtypes.bool_


def affine(expr: Expr, ranges: Ranges = _NO_RANGES) -> Affine:
    """The canonical affine form of an integer expression."""
    if isinstance(expr, Const):
        return Affine(constant=int(expr.value))
    if isinstance(expr, Op) and _is_int(expr):
        name, args = expr.op, expr.args
        if name in ("add", "sub"):
            return affine(args[0], ranges).plus(affine(args[1], ranges), 1 if name == "add" else -1)
        if name == "neg":
            return affine(args[0], ranges).scaled(-1)
        if name == "mul":
            a, b = affine(args[0], ranges), affine(args[1], ranges)
            if b.is_constant():
                return a.scaled(b.constant)
            if a.is_constant():
                return b.scaled(a.constant)
            if len(a.terms) == len(b.terms) == 1 and a.constant == b.constant == 0:
                (x, c), = a.terms.items()
                (y, d), = b.terms.items()
                return Affine({_product(x, y): c * d})
            return Affine({_product(a.to_expr(), b.to_expr()): 1})
        if name in ("floordiv", "mod"):
            divisor = affine(args[1], ranges)
            if divisor.is_constant() and divisor.constant > 0:
                return _divide(name, affine(args[0], ranges), divisor.constant, ranges)
            dividend = affine(args[0], ranges)
            by_size = _divide_by_size(name, dividend, divisor, ranges)
            if by_size is not None:
                return by_size
            return Affine({Op(name, (dividend.to_expr(), divisor.to_expr()), dtypes.index): 1})
        if name in ("max", "min"):
            a, b = affine(args[0], ranges), affine(args[1], ranges)
            if a.is_constant() and b.is_constant():
                pick = max if name == "max" else min
                return Affine(constant=pick(a.constant, b.constant))
            return Affine({Op(name, (a.to_expr(), b.to_expr()), dtypes.index): 1})
    return Affine({expr: 1})


def _product(a: Expr, b: Expr) -> Expr:
    """``a * b`` with the factors of nested products in one order, so that ``s0 * s1`` and
    ``s1 * s0`` are one expression."""
    factors = sorted(_factors(a) + _factors(b), key=str)
    result = factors[0]
    for f in factors[1:]:
        result = Op("mul", (result, f), dtypes.index)
    return result


def _factors(e: Expr) -> list[Expr]:
    if isinstance(e, Op) and e.op == "mul" and not isinstance(e.args[1], Const):
        return _factors(e.args[0]) + _factors(e.args[1])
    return [e]


def _divide_by_size(name: str, a: Affine, size: Affine, ranges: Ranges) -> Affine | None:
    """``a // size`` and ``a % size`` where ``size`` is known only at run time (``s0``, at least 1):
    a whole multiple of the size (``s0 * 64 // (s0 * 16)`` is 4, as a view's ``-1`` gives), and a
    coordinate that ranges over exactly that size."""
    if not _is_size(size):
        return None
    times = _multiple_of(a, size)
    if times is not None:
        return Affine(constant=times) if name == "floordiv" else Affine()
    if a.is_constant() and a.constant == 0:
        return Affine()
    if len(a.terms) == 1 and a.constant == 0:
        (atom, coef), = a.terms.items()
        extent = ranges.get(atom.name) if isinstance(atom, Var) and coef == 1 else None
        if isinstance(extent, Expr) and affine(extent).to_expr() == size.to_expr():
            return Affine() if name == "floordiv" else a
    return None


def _multiple_of(a: Affine, size: Affine) -> int | None:
    """The whole number ``q`` with ``a == q * size``, or None."""
    atom, coef = next(iter(size.terms.items()))
    times, left = divmod(a.terms.get(atom, 0), coef)
    if left or times < 0 or set(a.terms) != set(size.terms) or a.constant != times * size.constant:
        return None
    return times if all(a.terms[t] == times * c for t, c in size.terms.items()) else None


def _is_size(a: Affine) -> bool:
    """Whether ``a`` is a size known only at run time, so at least 1: products of symbols (``s0``,
    ``s0 * s1``; a symbol is at least 1) with positive coefficients, plus a number at least 0."""
    return bool(a.terms) and a.constant >= 0 and all(
        coef > 0 and _is_product(atom) and all(is_symbol_name(v.name) for v in _vars(atom))
        for atom, coef in a.terms.items())


def _is_product(e: Expr) -> bool:
    return isinstance(e, Var) or isinstance(e, Op) and e.op == "mul" and all(_is_product(x) for x in e.args)


def _divide(name: str, a: Affine, d: int, ranges: Ranges) -> Affine:
    if d == 1:
        return a if name == "floordiv" else Affine()
    carried = a.constant // d
    if carried and a.terms:
        reduced = _divide(name, Affine(a.terms, a.constant - carried * d), d, ranges)
        return reduced.plus(Affine(constant=carried)) if name == "floordiv" else reduced
    whole = Affine({t: c for t, c in a.terms.items() if c % d == 0})
    rest = Affine({t: c for t, c in a.terms.items() if c % d != 0}, a.constant)
    lo, hi = bounds(rest, ranges)
    split = _split_by_divisor(rest, d, ranges)
    if split is not None:
        atom, c, remainder = split
        q = d // c
        if name == "floordiv":
            quotient = Affine({t: k // d for t, k in whole.terms.items()})
            return quotient.plus(_divide("floordiv", Affine({atom: 1}), q, ranges))
        return _divide("mod", Affine({atom: 1}), q, ranges).scaled(c).plus(remainder)
    if name == "floordiv":
        quotient = Affine({t: c // d for t, c in whole.terms.items()})
        if lo is not None and hi is not None and lo // d == hi // d:
            return quotient.plus(Affine(constant=lo // d))
        if rest.is_constant():
            return quotient.plus(Affine(constant=rest.constant // d))
        inner = _nested_floordiv(rest, d)
        return quotient.plus(Affine({inner: 1}))
    if lo is not None and hi is not None and lo // d == hi // d:
        return rest.plus(Affine(constant=-(lo // d) * d))
    if rest.is_constant():
        return Affine(constant=rest.constant % d)
    return Affine({Op("mod", (rest.to_expr(), const(d)), dtypes.index): 1})


def _split_by_divisor(a: Affine, d: int, ranges: Ranges):
    """Find ``c * atom + remainder`` with ``c`` dividing ``d`` and 0 <= remainder < c.

    Then ``a // d == atom // (d / c)`` and ``a % d == c * (atom % (d / c)) + remainder``.
    """
    for atom, c in a.terms.items():
        if c <= 1 or d % c:
            continue
        remainder = Affine({t: k for t, k in a.terms.items() if t != atom}, a.constant)
        lo, hi = bounds(remainder, ranges)
        if lo is not None and lo >= 0 and hi < c:
            return atom, c, remainder
    return None


def _nested_floordiv(rest: Affine, d: int) -> Expr:
    """``(x // a) // d`` is ``x // (a * d)``."""
    if len(rest.terms) == 1 and rest.constant == 0:
        (atom, coef), = rest.terms.items()
        if coef == 1 and isinstance(atom, Op) and atom.op == "floordiv" and isinstance(atom.args[1], Const):
            return Op("floordiv", (atom.args[0], const(int(atom.args[1].value) * d)), dtypes.index)
    return Op("floordiv", (rest.to_expr(), const(d)), dtypes.index)


def atom_bounds(atom: Expr, ranges: Ranges) -> tuple[int | None, int | None]:
    """Inclusive bounds of an atom, or None where unknown."""
    if isinstance(atom, Var):
        extent = ranges.get(atom.name)
        return (0, extent - 1) if isinstance(extent, int) else (None, None)  # none, or a symbolic size
    if isinstance(atom, Op) and atom.op in ("floordiv", "mod") and isinstance(atom.args[1], Const):
        d = int(atom.args[1].value)
        lo, hi = bounds(affine(atom.args[0], ranges), ranges)
        if atom.op == "mod":
            if lo is not None and lo >= 0:
                return 0, d - 1 if hi is None else min(d - 1, hi)
            return None, None
        return (None if lo is None else lo // d, None if hi is None else hi // d)
    return None, None


def bounds(a: Affine, ranges: Ranges = _NO_RANGES) -> tuple[int | None, int | None]:
    """Inclusive lower and upper bound of an affine form, or None where unknown."""
    lo = hi = a.constant
    for atom, coef in a.terms.items():
        alo, ahi = atom_bounds(atom, ranges)
        if alo is None or ahi is None:
            return None, None
        lo += coef * (alo if coef > 0 else ahi)
        hi += coef * (ahi if coef > 0 else alo)
    return lo, hi


def simplify(expr: Expr, ranges: Ranges = _NO_RANGES) -> Expr:
    """Canonical, simplified form of an integer expression; other expressions are returned as they are."""
    if not _is_int(expr):
        return expr
    return _simplify(expr, tuple(sorted(ranges.items())))


@functools.lru_cache(maxsize=65536)
def _simplify(expr: Expr, ranges: tuple[tuple[str, int], ...]) -> Expr:
    """Schedules simplify the same index expressions many times over; they are immutable."""
    return affine(expr, dict(ranges)).to_expr()


set_operator_simplifier(simplify)


def coefficient(expr: Expr, var: str) -> int | None:
    """How much ``expr`` grows when ``var`` grows by one, if that is a constant.

    None when ``var`` occurs inside a division, a remainder or a product of variables.
    """
    form = affine(expr)
    total = 0
    for atom, coef in form.terms.items():
        if isinstance(atom, Var):
            if atom.name == var:
                total += coef
        elif var in {e.name for e in _vars(atom)}:
            return None
    return total


def _vars(e: Expr):
    if isinstance(e, Var):
        yield e
    for c in e.children():
        yield from _vars(c)


def linearize(index: tuple[Expr, ...], shape: tuple[int, ...]) -> Expr:
    """The row-major element offset of ``index`` in a contiguous tensor of ``shape``."""
    offset: Expr = const(0)
    stride = 1
    terms = []
    for idx, size in zip(reversed(index), reversed(shape)):
        terms.append(op("mul", idx, stride) if stride != 1 else idx)
        stride *= size
    for t in reversed(terms):
        offset = op("add", offset, t)
    return simplify(offset)


def delinearize(offset: Expr, shape: tuple[int, ...], ranges: Ranges = _NO_RANGES) -> tuple[Expr, ...]:
    """The row-major coordinates of element ``offset`` of a contiguous tensor of ``shape``."""
    coords = []
    stride = 1
    strides = []
    for size in reversed(shape):
        strides.append(stride)
        stride *= size
    strides.reverse()
    for size, st in zip(shape, strides):
        coord = op("floordiv", offset, st) if st != 1 else offset
        if size != stride:
            coord = op("mod", coord, size)
        coords.append(simplify(coord, ranges))
    return tuple(coords)

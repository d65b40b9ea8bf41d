"""Sizes known only at run time: symbols such as ``s0``.

A tensor's size along an axis is an ``int``, or an integer expression of symbols
(``s0``, ``s0 + 1``, ``s0 * 64``) where the program was captured with dynamic dimensions
(``torch.compile(..., dynamic=True)``, or Dynamo marking a size that changed). A symbol is
an index ``Var`` named ``s0``, ``s1``, ... in the order the program's inputs first use them,
so index expressions, loop extents and launch grids take it like any other variable and
the printed IR shows it. Its value comes from the shapes of the inputs at each call
(``bind``). Code that needs a number where a size is symbolic (an ordering, ``range``)
raises ``SymbolicSizeError``: the caller then compiles for the call's concrete sizes.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from typing import Iterable, Iterator, Mapping, Sequence

from lamina.core.errors import InputMismatchError, SymbolicSizeError
from lamina.core.ir import dtypes, expr as ex, index
from lamina.core.ir.expr import Expr
from lamina.core.ir.index import is_symbol_name

Size = int | Expr
"""A size along one axis: a number, or an expression of symbols."""

def symbol(position: int) -> ex.Var:
    """The ``position``-th symbol of a program: ``s0``, ``s1``, ..."""
    return ex.Var(f"s{position}", dtypes.index)


def is_symbolic(sizes: Size | Sequence[Size]) -> bool:
    """Whether ``sizes`` (one size or a shape) holds a symbol."""
    if isinstance(sizes, (tuple, list)):
        return any(isinstance(s, Expr) and not isinstance(s, ex.Const) for s in sizes)
    return isinstance(sizes, Expr) and not isinstance(sizes, ex.Const)


def symbols(sizes: Size | Iterable[Size]) -> set[str]:
    """The names of the symbols in one size or a shape."""
    found: set[str] = set()
    for size in (sizes if isinstance(sizes, (tuple, list)) else [sizes]):
        if isinstance(size, Expr):
            found |= {name for name in ex.free_vars(size) if is_symbol_name(name)}
    return found


def size(value: Size) -> Size:
    """``value`` simplified: an int where it is a number, else a canonical expression."""
    if isinstance(value, Expr):
        simplified = index.simplify(value)
        return int(simplified.value) if isinstance(simplified, ex.Const) else simplified
    return value


def is_empty(shape: Sequence[Size]) -> bool:
    """Whether a tensor of ``shape`` has no elements. A symbol is at least 1 (``bind`` checks)."""
    return any(isinstance(s, int) and s == 0 for s in shape)


def numel(shape: Sequence[Size]) -> Size:
    """How many elements a tensor of ``shape`` holds."""
    return size(math.prod(shape, start=1))


def blocks(count: Size, per_block: int) -> Size:
    """How many blocks of ``per_block`` cover ``count``: at least one where it is a number (a launch
    has a block), ``(count + per_block - 1) // per_block`` where it is known only at run time."""
    if isinstance(count, Expr):
        return size((count + per_block - 1) // per_block)
    return max(1, -(-count // per_block))


def evaluate(value: Size, values: Mapping[str, int]) -> int:
    """The number ``value`` stands for once each symbol has its value."""
    if not isinstance(value, Expr):
        return value
    result = index.simplify(ex.substitute(value, {name: ex.const(v) for name, v in values.items()}))
    if not isinstance(result, ex.Const):
        raise InputMismatchError(f"the size {value} needs the value of {', '.join(sorted(symbols(result)))}")
    return int(result.value)


def evaluate_shape(shape: Sequence[Size], values: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(evaluate(s, values) for s in shape)


def bind(shapes: Sequence[tuple[str, Sequence[Size]]], actual: Sequence[Sequence[int]]) -> dict[str, int]:
    """Each symbol's value for a call whose tensors have the shapes ``actual``.

    ``shapes`` names each tensor and gives its shape in the program. A symbol takes its value
    from the first axis whose size is that symbol alone or a multiple of it plus a number (``s0 * 4``,
    a batch of four sequences flattened); every size is then checked, so that
    tensors which disagree (``s0`` is 5 in one, 7 in another) are an ``InputMismatchError``
    rather than a kernel reading out of bounds."""
    values: dict[str, int] = {}
    for (_, shape), dims in zip(shapes, actual):
        for want, got in zip(shape, dims):
            found = solved(want, int(got))
            if found is not None:
                values.setdefault(*found)
    small = [f"{k} = {v}" for k, v in sorted(values.items()) if v < 1]
    if small:
        raise InputMismatchError(f"the call has {', '.join(small)}; a program compiled for sizes known only at "
                                 "run time takes sizes of at least 1")
    for (name, shape), dims in zip(shapes, actual):
        expected = tuple(shape)
        if len(expected) != len(dims) or any(evaluate(w, values) != g for w, g in zip(expected, dims)):
            where = ", ".join(f"{k} = {v}" for k, v in sorted(values.items()))
            raise InputMismatchError(
                f"input {name} has shape {list(dims)}, but the program takes [{', '.join(map(str, expected))}]"
                + (f" with {where}" if where else ""))
    return values


def given_symbol(value: Size) -> str | None:
    """The symbol that an axis of size ``value`` gives at a call: ``value``'s one symbol where it is
    that symbol times a number plus a number (``s0``, ``s0 * 4``, ``s0 + 1``), else None."""
    if not isinstance(value, Expr):
        return None
    form = index.affine(value)
    if len(form.terms) != 1:
        return None
    (atom, _), = form.terms.items()
    return atom.name if isinstance(atom, ex.Var) and is_symbol_name(atom.name) else None


def solved(value: Size, got: int) -> tuple[str, int] | None:
    """``(symbol, its value)`` where an axis of size ``value`` (``given_symbol``) has ``got`` elements and
    the symbol's value comes out whole; else None."""
    name = given_symbol(value)
    if name is None:
        return None
    form = index.affine(value)
    (_, coefficient), = form.terms.items()
    quotient, remainder = divmod(got - form.constant, coefficient)
    return None if remainder else (name, quotient)


_HINTS: contextvars.ContextVar[Mapping[str, int]] = contextvars.ContextVar("lamina_size_hints", default={})


@contextlib.contextmanager
def hinted(values: Mapping[str, int]) -> Iterator[None]:
    """While compiling: the value each symbol is expected to have (the example call's), which
    choices of speed (fusion, knobs) take in place of the symbol; never a choice of correctness."""
    token = _HINTS.set(dict(values))
    try:
        yield
    finally:
        _HINTS.reset(token)


def hints() -> Mapping[str, int]:
    """Each symbol's expected value in the compile under way (``hinted``): the choices of speed
    depend on them, so a cached program is one compiled at the same hints."""
    return dict(_HINTS.get())


def hint(value: Size) -> int:
    """``value`` at the expected sizes: for weighing costs only. A symbol without a hint counts as
    ``UNHINTED``."""
    if not isinstance(value, Expr):
        return value
    values = _HINTS.get()
    return evaluate(value, {name: values.get(name, UNHINTED) for name in symbols(value)})


UNHINTED = 128
"""What a symbol counts as where the compile was given no example of it."""


def slice_start(axis: Size, start: Size | None, end: Size | None, length: Size, step: int = 1) -> Size:
    """Where ``x[start:end:step]`` of an axis of ``axis`` elements begins, its ``length`` as the frontend
    traced it (Dynamo guards the clamping, so the length holds it). Where the end is a number, the
    slice begins ``length`` before where it stops, whatever its start: a negative start counts from the
    end and stops at 0 (a sliding window's last 4095 positions of a shorter cache are all of it), and
    a start known only at run time may be either. A start known only at run time before an end known
    only at run time is a position counted from 0 (``cache[p:p + 1]``)."""
    if start is None:
        return 0
    if isinstance(start, int) and start >= 0:
        return start
    if step == 1 and (end is None or isinstance(end, int)):
        if end is None or end >= _TO_THE_END:
            stop = axis
        elif end < 0:
            stop = axis + end
        else:
            stop = size(ex.op("min", ex.const(end), axis)) if isinstance(axis, Expr) else min(end, axis)
        return size(stop - length)
    if not isinstance(start, int):
        return start
    raise SymbolicSizeError(f"a slice from {start} to {end} by {step} of an axis of {axis}: where a negative start "
                            "stops at 0 depends on a size known only at run time")


_TO_THE_END = 1 << 62
"""An ``end`` at least this large runs to the end of any axis (Python's ``x[a:]`` is ``x[a:sys.maxsize]``)."""

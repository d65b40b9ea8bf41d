"""Shape rules shared by the Tensor IR builder: broadcasting, which axes of a view belong together, and
which storage a strided view reads."""

from __future__ import annotations

from typing import Sequence

from lamina.core.errors import SymbolicSizeError
from lamina.core.ir import sizes
from lamina.core.ir.sizes import Size


def broadcast_shape(*shapes: Sequence[int]) -> tuple[int, ...] | None:
    """The shape that NumPy's rules broadcast ``shapes`` to, or None when they do not broadcast."""
    rank = max((len(s) for s in shapes), default=0)
    result = []
    for axis in range(rank):
        sizes = {s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0} - {1}
        if len(sizes) > 1:
            return None
        result.append(sizes.pop() if sizes else 1)
    return tuple(result)


def shape_text(shape: Sequence[Size]) -> str:
    """``shape`` as a message shows it: ``[s0 + 1, 64]``."""
    return "[" + ", ".join(str(size) for size in shape) + "]"


def view_groups(src: tuple[Size, ...], dst: tuple[Size, ...]) -> list[tuple[list[int], list[int]]]:
    """Runs of consecutive axes of ``src`` and ``dst`` with equal element counts, in order.

    Where sizes are known only at run time, the runs are found with a distinct large prime in
    place of each symbol, then checked with the symbols: a run whose counts are not equal
    whatever the symbols is a ``SymbolicSizeError``."""
    if not sizes.is_symbolic(tuple(src) + tuple(dst)):
        return _groups(src, dst)
    found = sorted(sizes.symbols(tuple(src) + tuple(dst)))
    stand_in = {name: _PRIMES[k % len(_PRIMES)] for k, name in enumerate(found)}
    groups = _groups(sizes.evaluate_shape(src, stand_in), sizes.evaluate_shape(dst, stand_in))
    for src_axes, dst_axes in groups:
        a, b = sizes.numel([src[k] for k in src_axes]), sizes.numel([dst[k] for k in dst_axes])
        if a != b:
            raise SymbolicSizeError(f"viewing [{', '.join(map(str, src))}] as [{', '.join(map(str, dst))}] "
                                    f"joins {a} elements with {b}, which need not be equal")
    return groups


_PRIMES = (1000003, 1000033, 1000037, 1000039, 1000081, 1000099)


def _groups(src: tuple[int, ...], dst: tuple[int, ...]) -> list[tuple[list[int], list[int]]]:
    if 0 in src or 0 in dst:
        return [(list(range(len(src))), list(range(len(dst))))]
    groups = []
    i = j = 0
    while i < len(src) or j < len(dst):
        taken_src, taken_dst, count_src, count_dst = [], [], 1, 1
        while i < len(src) or j < len(dst):
            if taken_src and taken_dst and count_src == count_dst:
                break
            if j >= len(dst) or (i < len(src) and count_src <= count_dst):
                taken_src.append(i)
                count_src *= src[i]
                i += 1
            else:
                taken_dst.append(j)
                count_dst *= dst[j]
                j += 1
        groups.append((taken_src, taken_dst))
    return groups


def dense_order(shape: Sequence[int], strides: Sequence[int]) -> tuple[int, ...] | None:
    """The axes of a tensor of ``shape`` and ``strides`` from innermost to outermost in memory, where it
    holds its elements in that order without gaps or overlaps; else None."""
    order = tuple(sorted(range(len(shape)), key=lambda axis: (strides[axis], axis)))
    step = 1
    for axis in order:
        if shape[axis] != 1 and strides[axis] != step:
            return None
        step *= shape[axis]
    return order


def reads_within(numel: int, size, stride, first: int) -> bool:
    """Whether a view of ``size`` and ``stride`` from storage position ``first`` (counted from a
    tensor's first element) reads only that tensor's ``numel`` elements."""
    last = first + sum((extent - 1) * step for extent, step in zip(size, stride))
    return min(size, default=1) == 0 or (first >= 0 and min(stride, default=0) >= 0 and last < numel)

"""Shape rules shared by the Tensor IR builder: broadcasting, and which axes of a view belong together."""

from __future__ import annotations

from typing import Sequence


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


def view_groups(src: tuple[int, ...], dst: tuple[int, ...]) -> list[tuple[list[int], list[int]]]:
    """Runs of consecutive axes of ``src`` and ``dst`` with equal element counts, in order."""
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

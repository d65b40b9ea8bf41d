"""Which element of a staged tile each thread copies.

Tile elements are numbered so that thread ``tid`` copies elements ``tid``,
``tid + threads``, ... . The numbering makes the tile dimension that is contiguous
in global memory vary fastest, so that a warp reads whole runs of memory. When that
dimension is the outer one of the shared tile (a row-major ``x[m, k]`` staged k-major),
a warp writes down columns of the tile, and only the row padding keeps those writes
in distinct banks; where a warp spans several columns it can also take them far apart
("interleaved") so that, with one element of padding, their banks do not overlap.
The order with the fewest bank conflicts for the padded layout is chosen by counting them.
"""

from __future__ import annotations

import functools

import math

import attrs

WARP = 32
BANKS = 32
BANK_BYTES = 4


@attrs.frozen
class CopyOrder:
    """``fastest``: the tile dimension that varies fastest from one thread to the next.
    ``interleaved``: the columns that one warp writes are spread across the tile."""

    fastest: int
    interleaved: bool = False


def coordinates(order: CopyOrder, tile: tuple[int, ...], e):
    """Tile coordinates of element number ``e`` (an int, or an index expression)."""
    if len(tile) == 1:
        return (e,)
    outer, inner = tile
    if order.fastest == 1:
        return (e // inner, e % inner)
    column = e // outer
    if order.interleaved:
        group = WARP // outer
        column = (column // WARP) * WARP + (column % group) * outer + (column % WARP) // group
    return (e % outer, column)


def bank_conflicts(order: CopyOrder, tile: tuple[int, ...], padding: int, itemsize: int) -> int:
    """Extra shared-memory wavefronts that the warps' copy writes into one tile cost.

    Lanes wider than a bank are served in phases of 128 bytes, each counted on its own.
    """
    row = tile[-1] + padding
    lanes = WARP if itemsize <= BANK_BYTES else max(1, WARP * BANK_BYTES // itemsize)
    words_per_lane = max(1, itemsize // BANK_BYTES)
    count = math.prod(tile)
    total = 0
    for first in range(0, count, lanes):
        words_per_bank: dict[int, set[int]] = {}
        for e in range(first, min(first + lanes, count)):
            coords = coordinates(order, tile, e)
            offset = coords[0] * row + coords[1] if len(coords) == 2 else coords[0]
            for word in range(offset * itemsize // BANK_BYTES, offset * itemsize // BANK_BYTES + words_per_lane):
                words_per_bank.setdefault(word % BANKS, set()).add(word)
        total += max(len(words) for words in words_per_bank.values()) - 1
    return total


def _can_interleave(tile: tuple[int, ...]) -> bool:
    outer, inner = tile
    return outer < WARP and WARP % outer == 0 and inner % WARP == 0


@functools.cache
def choose_copy_order(tile: tuple[int, ...], padding: int, itemsize: int, contiguous: int | None) -> CopyOrder:
    """The order for a tile whose dimension ``contiguous`` is contiguous in global memory (None: neither)."""
    if len(tile) == 1 or contiguous != 0:
        return CopyOrder(len(tile) - 1)
    candidates = [CopyOrder(0)]
    if _can_interleave(tile):
        candidates.append(CopyOrder(0, interleaved=True))
    return min(candidates, key=lambda order: bank_conflicts(order, tile, padding, itemsize))


def describe(order: CopyOrder, dims: tuple[str, ...], tile: tuple[int, ...]) -> str:
    text = f"{dims[order.fastest]} fastest across threads"
    if order.interleaved:
        text += f", a warp's {dims[1]} {tile[0]} apart"
    return text

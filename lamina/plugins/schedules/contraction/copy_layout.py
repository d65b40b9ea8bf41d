"""Which elements of a staged tile each thread copies, how many at once, and the row padding.

Tile elements are numbered so that thread ``tid`` copies elements ``tid``,
``tid + threads``, ... . The numbering makes the tile dimension that is contiguous
in global memory vary fastest, so that a warp reads whole runs of memory. Where that
dimension is the inner one of the shared tile (``w[k, n]`` staged k-major), one copy
moves ``width`` neighbouring elements, up to 16 bytes, as far as the global layout and
the padded rows keep both addresses aligned. Where it is the outer one (a row-major
``x[m, k]`` staged k-major), a warp writes down columns of the tile one element at a
time, and only the row padding keeps those writes in distinct banks; where a warp spans
several columns it can also take them far apart ("interleaved") so that, with one
element of padding, their banks do not overlap. Where the rows must stay 16-byte aligned
(the inner loop reads them four elements at a time) the padding is a multiple of four
elements, and a warp instead writes a few adjacent columns a few rows deep, so that the
padding shifts each row onto banks the rows above did not use. The padding and order with
the fewest bank conflicts are chosen by counting them.
"""

from __future__ import annotations

import functools
import math

import attrs

WARP = 32
BANKS = 32
BANK_BYTES = 4
PHASE_BYTES = 128
COPY_BYTES = (4, 8, 16)
WARP_COLUMNS = (2, 4, 8)
PADDINGS = (0, 1, 2, 4, 8)


@attrs.frozen
class CopyOrder:
    """``fastest``: the tile dimension that varies fastest from one thread to the next.
    ``interleaved``: the columns that one warp writes are spread across the tile.
    ``width``: neighbouring elements of the inner dimension moved by one copy.
    ``warp_columns``: where above 1, a warp writes that many adjacent columns, ``WARP //
    warp_columns`` elements down each, instead of whole columns."""

    fastest: int
    interleaved: bool = False
    width: int = 1
    warp_columns: int = 1


def copies(order: CopyOrder, tile: tuple[int, ...]) -> int:
    """How many copies move the whole tile."""
    return math.prod(tile) // order.width


def coordinates(order: CopyOrder, tile: tuple[int, ...], e):
    """Tile coordinates of the first element of copy number ``e`` (an int, or an index expression)."""
    if len(tile) == 1:
        return (e * order.width,) if order.width > 1 else (e,)
    outer, inner = tile
    if order.fastest == 1:
        groups = inner // order.width
        return (e // groups, (e % groups) * order.width if order.width > 1 else e % groups)
    if order.warp_columns > 1:
        depth = WARP // order.warp_columns
        bands = outer // depth
        lane, rest = e % WARP, e // WARP
        return (lane % depth + depth * (rest % bands), lane // depth + order.warp_columns * (rest // bands))
    column = e // outer
    if order.interleaved:
        group = WARP // outer
        column = (column // WARP) * WARP + (column % group) * outer + (column % WARP) // group
    return (e % outer, column)


@functools.cache
def bank_conflicts(order: CopyOrder, tile: tuple[int, ...], padding: int, itemsize: int) -> int:
    """Extra shared-memory wavefronts that the warps' copy writes into one tile cost.

    Copies wider than a bank are served in phases of 128 bytes, each counted on its own. Kept per
    tile: choosing a padding weighs its copy order's conflicts again, and every layer's kernels
    have the same tiles.
    """
    row = tile[-1] + padding
    size = itemsize * order.width
    lanes = WARP if size <= BANK_BYTES else max(1, PHASE_BYTES // size)
    words_per_lane = max(1, size // BANK_BYTES)
    count = copies(order, tile)
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


def _can_split_columns(tile: tuple[int, ...], columns: int) -> bool:
    outer, inner = tile
    depth = WARP // columns
    return depth < outer and outer % depth == 0 and inner % columns == 0


def _can_interleave(tile: tuple[int, ...]) -> bool:
    outer, inner = tile
    return outer < WARP and WARP % outer == 0 and inner % WARP == 0


def copy_width(tile: tuple[int, ...], padding: int, itemsize: int, widest: int) -> int:
    """The most elements (at most ``widest``) that one copy into the inner dimension can move:
    4, 8 or 16 bytes, starting at an aligned element of every padded row."""
    row = tile[-1] + padding
    for width in (16 // itemsize, 8 // itemsize, 4 // itemsize):
        if 1 < width <= widest and tile[-1] % width == 0 and row % width == 0 and width * itemsize in COPY_BYTES:
            return width
    return 1


@functools.cache
def choose_copy_order(
    tile: tuple[int, ...], padding: int, itemsize: int, contiguous: int | None, widest: int = 1
) -> CopyOrder:
    """The order for a tile whose dimension ``contiguous`` is contiguous in global memory (None: neither),
    where the global layout allows copies of up to ``widest`` elements along it."""
    last = len(tile) - 1
    if contiguous == last:
        return CopyOrder(last, width=copy_width(tile, padding, itemsize, widest))
    if len(tile) == 1 or contiguous != 0:
        return CopyOrder(last)
    candidates = [CopyOrder(0)]
    if _can_interleave(tile):
        candidates.append(CopyOrder(0, interleaved=True))
    candidates += [CopyOrder(0, warp_columns=c) for c in WARP_COLUMNS if _can_split_columns(tile, c)]
    return min(candidates, key=lambda order: bank_conflicts(order, tile, padding, itemsize))


@functools.cache
def choose_padding(
    tile: tuple[int, ...], itemsize: int, contiguous: int | None, widest: int = 1, alignment: int = 1
) -> int:
    """The row padding, a multiple of ``alignment`` elements, whose copy has the fewest bank
    conflicts, then the widest copies, then the least padding."""
    if len(tile) == 1:
        return 0

    def score(padding: int):
        order = choose_copy_order(tile, padding, itemsize, contiguous, widest)
        return bank_conflicts(order, tile, padding, itemsize), -order.width, padding

    return min((p for p in PADDINGS if p % alignment == 0), key=score)


def describe(order: CopyOrder, dims: tuple[str, ...], tile: tuple[int, ...]) -> str:
    text = f"{dims[order.fastest]} fastest across threads"
    if order.width > 1:
        text += f", {order.width} elements per copy"
    if order.interleaved:
        text += f", a warp's {dims[1]} {tile[0]} apart"
    if order.warp_columns > 1:
        text += f", a warp's {WARP // order.warp_columns} {dims[0]} by {order.warp_columns} {dims[1]}"
    return text

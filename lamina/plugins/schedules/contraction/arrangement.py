"""How the contraction's threads form warps and how its blocks follow one another.

Neither changes what a block computes, so the cost model does not weigh them: once it has
chosen the tiles, these rules arrange them, unless the knobs ``warp_columns`` and
``grouped_rows`` are pinned.

At each step of k a warp reads the operand rows and columns of all its threads from shared
memory: as a patch of r x c threads with t_m x t_n register tiles, r t_m + c t_n distinct
elements, so the squarest patch reads the fewest. CUDA numbers threads x fastest, so a
block 16 threads wide makes warps of 2 x 16 threads, which read 16 + 128 elements with
8 x 8 tiles where 4 x 8 patches read 32 + 64. On the H200, TinyLlama's o projection at
M = 2048 had no shared-memory bank conflicts in 4 x 8 patches (64 thousand in 2 x 16) and
fewer warps waiting on shared loads.

Blocks resident at once share operand tiles in L2 only where they share block rows or
columns. In CUDA's order a wave of blocks spans few rows of the grid and many columns, so
each wave reads most of the n-side operand from memory again; running down groups of rows
first makes a wave a squarer patch of the grid.

Together the two made seven of the eight M = 2048 linears of the benchmark suite 0.3 to
2.6 % faster (Qwen2.5-7B's gate/up projection, 4736 blocks in 18 waves, the most) and
Qwen's down projection 0.3 % slower (``experiments/contraction_tiling/``).
"""

from __future__ import annotations

import math

import attrs

from lamina.core.ir import expr as ex, kernel_ir
from lamina.core.ir.expr import Var
from lamina.core.ir.kernel_ir import WARP_SIZE
from lamina.core.target import Target
from lamina.plugins.schedules.contraction.mma_sync import products as mma_sync
from lamina.plugins.schedules.contraction.knobs import WARP_COLUMNS, Choices
from lamina.plugins.schedules.contraction.recognise import Contraction


def _fits(choices: Choices, columns: int) -> bool:
    return choices.threads_n % columns == 0 and choices.threads_m % (WARP_SIZE // columns) == 0


def _in_cuda_order(choices: Choices, columns: int) -> bool:
    """Whether patches ``columns`` wide are the warps CUDA's own numbering makes."""
    return columns == min(choices.threads_n, WARP_SIZE) and choices.threads_n % columns == 0


def warp_patch(choices: Choices) -> tuple[int, int] | None:
    """The (rows, columns) of threads each warp covers, or None where warps are CUDA's own."""
    columns = choices.warp_columns
    if columns is None or _in_cuda_order(choices, columns):
        return None
    return WARP_SIZE // columns, columns


def elements_read(choices: Choices, columns: int) -> int:
    """Distinct operand elements a warp of patches ``columns`` wide reads at each step of k."""
    return WARP_SIZE // columns * choices.thread_m + columns * choices.thread_n


def problem(choices: Choices) -> str | None:
    """Why a pinned arrangement cannot apply to ``choices``, or None."""
    columns = choices.warp_columns
    if columns is not None and not _in_cuda_order(choices, columns) and not _fits(choices, columns):
        return (f"warps of {WARP_SIZE // columns} x {columns} threads do not tile the block's "
                f"{choices.threads_m} x {choices.threads_n} threads")
    return None


def choose_warp_columns(choices: Choices) -> int | None:
    """The patch width that reads the fewest elements (the wider of two equal ones), or None
    where no patch tiles the block's threads."""
    fitting = [w for w in WARP_COLUMNS if _fits(choices, w)]
    if not fitting:
        return None
    return min(fitting, key=lambda w: (elements_read(choices, w), -w))


def grid_rows_and_columns(c: Contraction, choices: Choices) -> tuple[int, int]:
    return math.ceil(c.extents[c.m] / choices.block_m), math.ceil(c.extents[c.n] / choices.block_n)


def choose_grouped_rows(c: Contraction, choices: Choices, wave: int) -> int:
    """1 (CUDA's order) where a wave of ``wave`` blocks holds the whole grid, else groups of
    about the square root of a wave, so that a wave spans as many rows as columns."""
    rows, columns = grid_rows_and_columns(c, choices)
    if rows * columns <= wave:
        return 1
    return max(1, min(rows, math.isqrt(wave)))


def grouped(c: Contraction, choices: Choices, resident_per_sm: int, target: Target) -> Choices:
    """``choices`` with ``grouped_rows`` chosen where it is not pinned (the warps are fixed)."""
    if choices.grouped_rows is not None:
        return choices
    return attrs.evolve(choices, grouped_rows=choose_grouped_rows(c, choices, resident_per_sm * target.sm_count))


def arranged(c: Contraction, choices: Choices, resident_per_sm: int, target: Target) -> Choices:
    """``choices`` with the unpinned arrangement knobs chosen."""
    if choices.warp_columns is not None:
        columns = choices.warp_columns
    else:
        columns = mma_sync.PATCH_COLUMNS if choices.on_tensor_cores else choose_warp_columns(choices)
    grouped = choices.grouped_rows if choices.grouped_rows is not None else choose_grouped_rows(
        c, choices, resident_per_sm * target.sm_count)
    return attrs.evolve(choices, warp_columns=columns, grouped_rows=grouped)


def describe(c: Contraction, choices: Choices, resident_per_sm: int, target: Target) -> list[tuple[str, str]]:
    """Tile IR notes: why the warps and the block order are what they are."""
    columns = choices.warp_columns
    if columns is None:
        warps = f"{min(choices.threads_n, WARP_SIZE)} threads of a row, in CUDA's order"
    else:
        cuda = min(choices.threads_n, WARP_SIZE)
        warps = (f"{WARP_SIZE // columns}x{columns} threads, reading {elements_read(choices, columns)} "
                 f"operand elements per step of k")
        if columns != cuda and _fits(choices, cuda):
            warps += f" (CUDA's {WARP_SIZE // cuda}x{cuda}: {elements_read(choices, cuda)})"
    return [("warp_tile", warps), block_order(c, choices, resident_per_sm, target)]


def block_order(c: Contraction, choices: Choices, resident_per_sm: int, target: Target) -> tuple[str, str]:
    """The Tile IR note on the order of the blocks."""
    rows, grid_columns = grid_rows_and_columns(c, choices)
    wave = resident_per_sm * target.sm_count
    order = f"{rows}x{grid_columns} blocks, {wave} at once: "
    order += (f"down groups of {choices.grouped_rows} rows" if (choices.grouped_rows or 1) > 1
              else "along x first, in CUDA's order")
    return ("block_order", order)


def grouped_blocks(row: Var, column: Var, columns: int, rows: int, grouped_rows: int, flat=None) -> list:
    """Kernel IR declaring the block's ``row`` and ``column`` in a grid of ``columns`` x ``rows``
    blocks: CUDA's order renumbered to run down groups of ``grouped_rows`` grid rows, column by
    column (the last group holds the rows that are left). ``flat`` is the block's place in CUDA's
    order (by default its own; a persistent block passes the tile it is at)."""
    group = min(grouped_rows, rows)
    if flat is None:
        flat = kernel_ir.block_idx("y") * columns + kernel_ir.block_idx("x")
    per_group = group * columns
    first = flat // per_group * group
    height = ex.const(group) if rows % group == 0 else ex.op("min", rows - first, group)
    return [
        kernel_ir.Declare(row.name, row.dtype, first + flat % per_group % height),
        kernel_ir.Declare(column.name, column.dtype, flat % per_group // height),
    ]

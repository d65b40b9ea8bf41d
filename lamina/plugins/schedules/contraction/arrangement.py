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


def choose_grouped_rows(c: Contraction, choices: Choices, wave: int, batch_rows: int = 1) -> int:
    """1 (CUDA's order) where a wave of ``wave`` blocks holds the whole grid, else groups of
    about the square root of a wave, so that a wave spans as many rows as columns; the grid's
    rows are those of ``batch_rows`` batch entries (``batch_as_rows``)."""
    rows, columns = grid_rows_and_columns(c, choices)
    rows *= batch_rows
    if rows * columns <= wave:
        return 1
    return max(1, min(rows, math.isqrt(wave)))


def batch_as_rows(c: Contraction) -> int:
    """How many batch entries' block rows the blocks may run down as one column of rows: all of them
    where the n side's operands read no batch variable (a linear layer applied to a batch of
    sequences reads the same weights for each), so that the blocks that read a column of B run
    together, whatever their entry, while L2 holds it; else 1, where each entry has a B of its own,
    or the sizes are known only at run time. With the batch outermost, the blocks of a batch of 8
    sequences through Qwen2.5-7B's LM head swept its 1.1 GB of weights, twenty times L2, once per
    sequence; the products timed so far are compute-bound and run at the same pace either way
    (``experiments/batch_rows/``)."""
    if not c.batch or not all(isinstance(c.extents[v], int) for v in (*c.batch, c.m, c.n)):
        return 1
    sides = ([o.load for o in c.operands if o.side == "n"] + ([c.paired.operand.load] if c.paired else [])
             + [p.column_operand.load for p in c.pieces])
    batch = set(c.batch)
    if any(isinstance(node, ex.Var) and node.name in batch for load in sides for i in load.index
           for node in ex.walk(i)):
        return 1
    return math.prod(c.extents[v] for v in c.batch)


def grouped(c: Contraction, choices: Choices, resident_per_sm: int, target: Target, batch_rows: int = 1) -> Choices:
    """``choices`` with ``grouped_rows`` chosen where it is not pinned (the warps are fixed), the
    grid's rows being those of ``batch_rows`` batch entries."""
    if choices.grouped_rows is not None:
        return choices
    return attrs.evolve(choices, grouped_rows=choose_grouped_rows(c, choices, resident_per_sm * target.sm_count,
                                                                  batch_rows))


def arranged(c: Contraction, choices: Choices, resident_per_sm: int, target: Target,
             batch_rows: int = 1) -> Choices:
    """``choices`` with the unpinned arrangement knobs chosen, the grid's rows being those of
    ``batch_rows`` batch entries."""
    if choices.warp_columns is not None:
        columns = choices.warp_columns
    else:
        columns = mma_sync.PATCH_COLUMNS if choices.on_tensor_cores else choose_warp_columns(choices)
    grouped = choices.grouped_rows if choices.grouped_rows is not None else choose_grouped_rows(
        c, choices, resident_per_sm * target.sm_count, batch_rows)
    return attrs.evolve(choices, warp_columns=columns, grouped_rows=grouped)


def describe(c: Contraction, choices: Choices, resident_per_sm: int, target: Target,
             batch_rows: int = 1) -> list[tuple[str, str]]:
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
    return [("warp_tile", warps), block_order(c, choices, resident_per_sm, target, batch_rows)]


def block_order(c: Contraction, choices: Choices, resident_per_sm: int, target: Target,
                batch_rows: int = 1) -> tuple[str, str]:
    """The Tile IR note on the order of the blocks, the grid's rows being those of ``batch_rows``
    batch entries."""
    rows, grid_columns = grid_rows_and_columns(c, choices)
    wave = resident_per_sm * target.sm_count
    entries = f" ({batch_rows} entries of the batch)" if batch_rows > 1 else ""
    order = f"{rows * batch_rows}x{grid_columns} blocks{entries}, {wave} at once: "
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


def blocks_across_batch(batch: Var, row: Var, column: Var, joint_row: Var, grid: dict, grouped_rows: int) -> list:
    """Kernel IR declaring the block's ``batch`` entry, ``row`` and ``column`` where the block rows of
    the batch's entries run as one column of rows (``batch_as_rows``): CUDA's order over (z, y, x)
    renumbered to run down groups of ``grouped_rows`` of them, ``joint_row`` the row among all."""
    flat = (kernel_ir.block_idx("z") * grid["y"] + kernel_ir.block_idx("y")) * grid["x"] + kernel_ir.block_idx("x")
    return [*grouped_blocks(joint_row, column, grid["x"], grid["y"] * grid["z"], grouped_rows, flat),
            kernel_ir.Declare(batch.name, batch.dtype, joint_row // grid["y"]),
            kernel_ir.Declare(row.name, row.dtype, joint_row % grid["y"])]

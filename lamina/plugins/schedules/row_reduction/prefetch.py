"""A matrix-vector product's matrix rows prefetched into L2 before the block waits for the
previous kernel (``prefetch_to_l2``).

On Hopper each kernel launches while the previous one finishes and waits for it before touching
memory (``kernel_passes/overlap_with_previous_kernel``). A decoding step is a chain of such
kernels, most of them matrix-vector products whose matrix (a layer's weights) no kernel of the
step writes: while a block waits, it can already bring the first lines of its rows from memory
into L2 (``PrefetchToL2``, a hint that changes no value), so that its loads after the wait find
them there instead of each block starting its first trip to memory only then. Only the blocks of
the first wave, which can start while the previous kernel runs, prefetch (a later block would read
its lines right after prefetching them): each its rows from the first on, 128-byte lines spread
over its threads, up to an equal share of ``L2_SHARE`` of the L2, so that the prefetched lines are
still in L2 when the blocks read them.
"""

from __future__ import annotations

import math

from lamina.core.ir import dtypes, expr as ex, index, kernel_ir, loop_ir, sizes
from lamina.core.ir.expr import Expr
from lamina.core.ir.names import fresh_name
from lamina.core.target import Target
from lamina.plugins.schedules import loop_to_kernel
from lamina.plugins.schedules.row_reduction.recognise import RowReduction

LINE_BYTES = 128
"""What one prefetch brings into L2."""
L2_SHARE = 0.25
"""The share of L2 that a launch's prefetches fill at most, so that a line is still there when read."""
MAX_BLOCKS_PER_SM = 32
"""Blocks an SM holds at most at once (sm_50 and later)."""


def matrix_reads(row: RowReduction) -> tuple[loop_ir.Load, ...]:
    """The reads of a reduction that follow both the row and the column, contiguous along the
    column, in a reduction that also reads a vector (an access of the column alone): the matrix of
    a matrix-vector product, one load per buffer and index, with the column as ``row.column_name``."""
    row_vars = {loop.var for loop in row.rows}
    found: dict[tuple, loop_ir.Load] = {}
    for phase in row.phases:
        loop = phase.loop
        if loop is None or loop.kind != "reduce":
            continue
        loads = [node for s in loop.body for e in loop_ir.expressions(s) for node in ex.walk(e)
                 if isinstance(node, loop_ir.Load) and any(loop.var in ex.free_vars(i) for i in node.index)]
        moving = [set().union(*map(ex.free_vars, load.index)) & row_vars for load in loads]
        if not any(not m for m in moving):
            continue  # no vector: a norm's rows, which the previous kernel usually writes
        for load, follows in zip(loads, moving):
            offset = index.linearize(load.index, row.kernel.buffer(load.buffer).type.shape)
            if follows and index.coefficient(offset, loop.var) == 1 and load.buffer in _inputs(row):
                column = ex.Var(row.column_name)
                key = row.key(load, loop.var)
                found.setdefault(key, loop_ir.Load(load.buffer, tuple(ex.substitute(i, {loop.var: column})
                                                                      for i in load.index), load.dtype))
    return tuple(found.values())


def _inputs(row: RowReduction) -> set[str]:
    written = {b.name for b in row.kernel.outputs}
    return {b.name for b in row.kernel.inputs if b.name not in written}


def lines_per_row(row: RowReduction, load: loop_ir.Load) -> int:
    return math.ceil(sizes.hint(row.length) * load.dtype.itemsize / LINE_BYTES)


def first_wave(target: Target, block_threads: int, launch_blocks: int) -> int:
    """The blocks of a launch that the SMs hold at once: those that prefetch."""
    per_sm = min(MAX_BLOCKS_PER_SM, target.max_threads_per_sm // block_threads)
    return min(launch_blocks, target.sm_count * per_sm)


def lines_per_block(row: RowReduction, rows_per_block: int, prefetching_blocks: int, l2_bytes: int) -> int:
    """The lines each prefetching block brings into L2: all of its rows' lines, within its share of
    ``L2_SHARE`` of the L2."""
    wanted = rows_per_block * sum(lines_per_row(row, load) for load in matrix_reads(row))
    share = int(l2_bytes * L2_SHARE) // (max(prefetching_blocks, 1) * LINE_BYTES)
    return max(1, min(wanted, share))


def statements(row: RowReduction, first_row: Expr, threads_per_row: int, rows_per_block: int, lines: int,
               taken: set[str]) -> list[kernel_ir.Stmt]:
    """The block's prefetches of its first ``lines`` lines (row by row, each matrix's in turn), its
    threads (``threads_per_row`` along x by ``rows_per_block`` along y) taking them in turn;
    ``first_row`` is the block's first row. Names are fresh against ``taken``."""
    thread = ex.Var(fresh_name("prefetch_thread", taken))
    slot = ex.Var(fresh_name("prefetch_slot", taken))
    line = ex.Var(fresh_name("prefetch_line", taken))
    row_var = ex.Var(fresh_name("prefetch_row", taken))
    renamed = {loop.var: fresh_name(f"prefetch_{loop.var}", taken) for loop in row.rows}
    loops = tuple(loop_ir.Loop(renamed[loop.var], loop.extent, loop.kind, ()) for loop in row.rows)
    declarations, bound = loop_to_kernel.bind_point(loops, row_var, row.row_count)
    env = {var: bound[name] for var, name in renamed.items()}
    reads = [(load, lines_per_row(row, load)) for load in matrix_reads(row)]
    per_row = sum(count for _, count in reads)
    in_row = index.simplify(line % per_row)
    prefetches: list[kernel_ir.Stmt] = []
    start = 0
    for load, count in reads:
        column = index.simplify((in_row - start) * (LINE_BYTES // load.dtype.itemsize))
        offset = index.linearize(load.index, row.kernel.buffer(load.buffer).type.shape)
        at = index.simplify(loop_to_kernel.translate_expr(offset, row.kernel, {**env, row.column_name: column}))
        prefetch = kernel_ir.PrefetchToL2(load.buffer, at)
        prefetches.append(prefetch if len(reads) == 1 else kernel_ir.If(
            ex.op("and", ex.op("ge", in_row, start), ex.op("lt", in_row, start + count)), (prefetch,)))
        start += count
    row_ok = ex.op("and", ex.op("lt", line, lines), ex.op("lt", row_var, row.row_count))
    block_threads = threads_per_row * rows_per_block
    body = [kernel_ir.Declare(line.name, dtypes.index, index.simplify(slot * block_threads + thread)),
            kernel_ir.Declare(row_var.name, dtypes.index, index.simplify(first_row + line // per_row)),
            kernel_ir.If(row_ok, (*declarations, *prefetches))]
    threads = kernel_ir.thread_idx("x") if rows_per_block == 1 else index.simplify(
        kernel_ir.thread_idx("x") + kernel_ir.thread_idx("y") * threads_per_row)
    return [kernel_ir.Declare(thread.name, dtypes.index, threads),
            kernel_ir.For(slot.name, ex.const(0), ex.const(math.ceil(lines / block_threads)), 1, tuple(body),
                          unroll=True)]

"""The transpose schedule's Tile IR as Kernel IR.

With a T x T tile and R warps (T = 32, R = 8), block (bx, by, bz) runs::

    shared tile[T][T + 1]
    for k in 0..T/R (unrolled):                       the input, along its rows
      row = bx * T + threadIdx.y + k * R;  column = by * T + threadIdx.x
      if row < rows and column < columns:            (left out where the tiles divide the axis)
        tile[threadIdx.y + k * R][threadIdx.x] = x[... row, column, batch bz ...]
    barrier
    for k in 0..T/R (unrolled):                       the output, along its rows
      row = bx * T + threadIdx.x;  column = by * T + threadIdx.y + k * R
      if row < rows and column < columns:
        out[... row, column, batch bz ...] = value(tile[threadIdx.x][threadIdx.y + k * R])
"""

from __future__ import annotations

from lamina.core.ir import expr as ex, index, kernel_ir, loop_ir, tile_ir
from lamina.core.ir.expr import Expr
from lamina.core.ir.names import fresh_name
from lamina.plugins.schedules import loop_to_kernel
from lamina.plugins.schedules.transpose.analysis import transposed_copy


def lower(tile: tile_ir.TileKernel) -> kernel_ir.Kernel:
    kernel = tile.kernel
    copy = transposed_copy(kernel)
    along_rows, along_columns = tile.grid[0], tile.grid[1]
    size, warps, passes = along_rows.threads, along_columns.threads, along_columns.per_thread
    (stage,) = tile.stages
    loops = [s for s in loop_ir.statements(kernel.body) if isinstance(s, loop_ir.Loop)]
    taken = {b.name for b in kernel.inputs + kernel.outputs} | {loop.var for loop in loops}
    shared = kernel_ir.Array(fresh_name("tile", taken), stage.dtype, stage.padded_shape[1:], "shared")
    step = ex.Var(fresh_name("k", taken | {shared.name}))
    x, y = kernel_ir.thread_idx("x"), kernel_ir.thread_idx("y")
    first_row = kernel_ir.block_idx("x") * size
    first_column = kernel_ir.block_idx("y") * size
    env: dict[str, Expr] = {loop.var: ex.const(0) for loop in loops}  # the loops of one iteration
    batch = index.delinearize(kernel_ir.block_idx("z"), tuple(loop.extent for loop in copy.batch))
    env.update({loop.var: coordinate for loop, coordinate in zip(copy.batch, batch)})
    rows, columns = copy.rows, copy.columns

    def at(row: Expr, column: Expr) -> dict[str, Expr]:
        return {**env, rows.var: index.simplify(row), columns.var: index.simplify(column)}

    def bounded(row: Expr, column: Expr, work: kernel_ir.Stmt) -> kernel_ir.Stmt:
        checks = [ex.op("lt", value, loop.extent) for value, loop in ((row, rows), (column, columns))
                  if loop.extent % size]
        if not checks:
            return work
        condition = checks[0] if len(checks) == 1 else ex.op("and", *checks)
        return kernel_ir.If(condition, (work,))

    across = y + step * warps
    row, column = first_row + across, first_column + x
    read = loop_to_kernel.translate_expr(copy.load, kernel, at(row, column))
    load_tile = bounded(row, column, kernel_ir.Store(shared.name, (across, x), read))

    row, column = first_row + x, first_column + across
    from_tile = kernel_ir.Load(shared.name, (x, across), stage.dtype)
    value = loop_to_kernel.translate_expr(copy.store.value, kernel, at(row, column),
                                          load=lambda node, idx: from_tile)
    out_index = tuple(loop_to_kernel.translate_expr(i, kernel, at(row, column)) for i in copy.store.index)
    shape = kernel.buffer(copy.store.buffer).type.shape
    store = kernel_ir.Store(copy.store.buffer, (index.simplify(index.linearize(out_index, shape)),), value)
    store_tile = bounded(row, column, store)

    body = (
        kernel_ir.For(step.name, ex.const(0), ex.const(passes), 1, (load_tile,), unroll=True),
        kernel_ir.Barrier(),
        kernel_ir.For(step.name, ex.const(0), ex.const(passes), 1, (store_tile,), unroll=True),
    )
    grid = (along_rows.blocks, along_columns.blocks, tile.grid[2].extent if len(tile.grid) > 2 else 1)
    return kernel_ir.Kernel(
        name=kernel.name,
        params=loop_to_kernel.params(kernel),
        arrays=(shared,),
        body=body,
        launch=kernel_ir.Launch(grid, (size, warps, 1)),
    )


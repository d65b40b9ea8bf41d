"""The generic schedule's Tile IR as Kernel IR.

Each thread computes one point of the flattened parallel loops::

    var linear = blockIdx.x * T + threadIdx.x
    if linear < total:              (left out when the blocks cover exactly total points)
      var i0 = linear // n1         (the point's coordinates, row-major)
      var i1 = linear % n1
      ... the loop kernel's body, reductions as serial loops ...
"""

from __future__ import annotations

from lamina.core.errors import ScheduleError
from lamina.core.ir import expr as ex, index, kernel_ir, sizes, tile_ir
from lamina.core.ir.names import fresh_name
from lamina.plugins.schedules import loop_to_kernel


def lower(tile: tile_ir.TileKernel) -> kernel_ir.Kernel:
    kernel = tile.kernel
    loops, inner = loop_to_kernel.split_parallel_nest(kernel.body)
    (binding,) = tile.grid
    if binding.vars != tuple(loop.var for loop in loops) or binding.per_thread != 1:
        raise ScheduleError(
            f"kernel {kernel.name}: the generic lowering expects one thread per point of the parallel loops "
            f"{[loop.var for loop in loops]}, but the tile binds {list(binding.vars)} with "
            f"{binding.per_thread} per thread; schedule it with the generic schedule"
        )
    threads, total = binding.threads, binding.extent
    taken = loop_to_kernel.names_in(kernel)
    linear = ex.Var(fresh_name("linear", taken))

    body, env = loop_to_kernel.bind_point(loops, linear, total)
    body += loop_to_kernel.translate_body(inner, kernel, env)

    blocks = sizes.blocks(total, threads)
    start = index.simplify(kernel_ir.block_idx("x") * threads + kernel_ir.thread_idx("x"))
    statements: list[kernel_ir.Stmt] = [kernel_ir.Declare(linear.name, linear.dtype, start)]
    if blocks * threads != total:
        statements.append(kernel_ir.If(ex.op("lt", linear, total), tuple(body)))
    else:
        statements += body
    return kernel_ir.Kernel(
        name=kernel.name,
        params=loop_to_kernel.params(kernel),
        arrays=(),
        body=tuple(statements),
        launch=kernel_ir.Launch((blocks, 1, 1), (threads, 1, 1)),
        sizes=loop_to_kernel.size_params(kernel),
    )

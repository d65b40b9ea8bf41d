"""The strided schedule's Tile IR as Kernel IR.

With ``T`` threads and ``E`` points per thread, thread ``t`` of block ``b`` computes
the points ``b * T * E + e * T + t`` for ``e`` in ``0..E``::

    var base = blockIdx.x * (T * E) + threadIdx.x
    unrolled for e in 0..E:
      var linear = base + e * T
      if linear < total:            (left out when the blocks cover exactly total points)
        var i0 = linear // n1       (the point's coordinates, row-major)
        ... the loop kernel's stores ...
"""

from __future__ import annotations

import math

from lamina.core.errors import ScheduleError
from lamina.core.ir import dtypes, expr as ex, index, kernel_ir, tile_ir
from lamina.core.ir.names import fresh_name
from lamina.plugins.schedules import loop_to_kernel


def lower(tile: tile_ir.TileKernel) -> kernel_ir.Kernel:
    kernel = tile.kernel
    loops, inner = loop_to_kernel.split_parallel_nest(kernel.body)
    (binding,) = tile.grid
    if binding.vars != tuple(loop.var for loop in loops) or binding.contiguous:
        raise ScheduleError(
            f"kernel {kernel.name}: the strided lowering expects the parallel loops {[loop.var for loop in loops]} "
            f"strided over the threads, but the tile binds {list(binding.vars)}"
            + (" contiguously" if binding.contiguous else "")
        )
    taken = {b.name for b in kernel.inputs + kernel.outputs} | {loop.var for loop in loops}
    base, step, linear = (ex.Var(fresh_name(name, taken)) for name in ("base", "e", "linear"))
    threads, total, block_tile = binding.threads, binding.extent, binding.block_tile

    body, env = loop_to_kernel.bind_point(loops, linear, total)
    body += loop_to_kernel.translate_body(inner, kernel, env)

    blocks = max(1, math.ceil(total / block_tile))
    point: list[kernel_ir.Stmt] = [kernel_ir.Declare(linear.name, dtypes.index, index.simplify(base + step * threads))]
    if blocks * block_tile != total:
        point.append(kernel_ir.If(ex.op("lt", linear, total), tuple(body)))
    else:
        point += body
    start = index.simplify(kernel_ir.block_idx("x") * block_tile + kernel_ir.thread_idx("x"))
    return kernel_ir.Kernel(
        name=kernel.name,
        params=loop_to_kernel.params(kernel),
        arrays=(),
        body=(
            kernel_ir.Declare(base.name, dtypes.index, start),
            kernel_ir.For(step.name, ex.const(0), ex.const(binding.per_thread), 1, tuple(point), unroll=True),
        ),
        launch=kernel_ir.Launch((blocks, 1, 1), (threads, 1, 1)),
    )

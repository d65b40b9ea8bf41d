"""Which kernels are transposing copies: one store of one buffer read across its rows.

``out[i0, i1, i2] = x[i0, i2, i1]`` (with a cast, or a K-major copy of attention's values)
walks the output along ``i2`` and the input along ``i1``. Whichever of the two a thread's
neighbours follow, the other is read or written an element per row: each element then moves
a whole 32-byte sector through the memory system. A transposing copy exchanges the two
through shared memory instead, so that both sides move whole rows.
"""

from __future__ import annotations

import math

import attrs

from lamina.core.ir import expr as ex, index, loop_ir
from lamina.plugins.schedules.pointwise.analysis import pointwise_nest

MIN_EXTENT = 16
"""Both axes of the exchange at least this long: a shorter one leaves most of a tile's
threads idle, and a pointwise kernel moves such a copy as well."""
MAX_GRID = 65535
"""The most blocks along y or z a launch may have."""


@attrs.frozen
class TransposedCopy:
    """The kernel's store walks ``rows`` along the output's rows (the innermost loop) and
    reads ``load``, whose rows run along ``columns``; ``batch`` are the other loops."""

    load: loop_ir.Load
    store: loop_ir.Store
    rows: loop_ir.Loop
    columns: loop_ir.Loop
    batch: tuple[loop_ir.Loop, ...]

    @property
    def batch_extent(self) -> int:
        return math.prod(loop.extent for loop in self.batch)


def transposed_copy(kernel: loop_ir.Kernel) -> TransposedCopy | None:
    """The kernel as a transposing copy, or None where it is something else."""
    nest = pointwise_nest(kernel)
    if nest is None or len(nest.stores) != 1:
        return None
    (store,) = nest.stores
    moving = [loop for loop in nest.loops if loop.extent > 1]
    if not moving or tuple(store.index) != tuple(ex.Var(loop.var) for loop in nest.loops):
        return None
    loads = [node for node in ex.walk(store.value) if isinstance(node, loop_ir.Load)]
    if len(loads) != 1 or ex.free_vars(_without(store.value, loads[0])):
        return None
    (load,) = loads
    if load.dtype.itemsize > 4:
        return None
    offset = index.affine(index.linearize(load.index, kernel.buffer(load.buffer).type.shape))
    if not all(isinstance(atom, ex.Var) for atom in offset.terms):
        return None
    steps = {atom.name: coefficient for atom, coefficient in offset.terms.items()}
    rows = moving[-1]
    columns = [loop for loop in moving if steps.get(loop.var) == 1]
    if len(columns) != 1 or columns[0] is rows or steps.get(rows.var, 0) == 0:
        return None
    (columns,) = columns
    batch = tuple(loop for loop in moving if loop is not rows and loop is not columns)
    copy = TransposedCopy(load, store, rows, columns, batch)
    if min(rows.extent, columns.extent) < MIN_EXTENT or copy.batch_extent > MAX_GRID:
        return None
    return copy


def _without(value: ex.Expr, load: loop_ir.Load) -> ex.Expr:
    """``value`` with ``load`` replaced by a constant: what it computes besides reading it."""
    return ex.transform(value, lambda node: ex.const(0, load.dtype) if node == load else None)

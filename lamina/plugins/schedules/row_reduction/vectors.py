"""Which accesses of a row can move as 16-byte vectors.

With vectors of ``width`` elements, thread ``t`` owns vectors ``t``, ``t + threads``,
... of the row: elements ``v * width`` to ``v * width + width - 1`` of vector ``v``.
An access inside a loop over the row reads (or writes) those elements as one aligned
vector exactly when its row-major offset grows by one with the loop variable and
everything else in the offset is a multiple of ``width``; a vector wider than 16 bytes
moves in several accesses of 16 bytes (``accesses``). A load that only some elements
evaluate (a branch of ``where``, the right of ``and``/``or``) stays one scalar load per
element: its index may be valid only where it is evaluated.
"""

from __future__ import annotations

from lamina.core.ir import expr as ex, index, kernel_ir, loop_ir
from lamina.core.ir.dtypes import DType
from lamina.core.ir.expr import Expr
from lamina.plugins.schedules.pointwise.analysis import VECTOR_BYTES, unconditional_loads
from lamina.plugins.schedules.row_reduction.recognise import RowReduction

def accesses(width: int, itemsize: int) -> tuple[int, int]:
    """How a vector of ``width`` elements of ``itemsize`` bytes moves: (accesses, elements in each)."""
    per_access = min(width, VECTOR_BYTES // itemsize)
    return width // per_access, per_access


def is_vector_access(kernel: loop_ir.Kernel, buffer: str, idx: tuple[Expr, ...], dtype: DType, var: str,
                     width: int) -> bool:
    """Whether ``buffer[idx]`` (of elements of ``dtype``) at ``width`` adjacent values of
    ``var`` from a multiple of ``width`` is one aligned vector of the buffer."""
    found = kernel.buffer(buffer).type
    _, per_access = accesses(width, found.dtype.itemsize)
    if found.dtype != dtype or per_access < 2 or per_access * found.dtype.itemsize not in kernel_ir.VECTOR_BYTES:
        return False
    if any(isinstance(node, loop_ir.Load) for e in idx for node in ex.walk(e)):
        return False
    offset = index.linearize(idx, found.shape)
    if index.coefficient(offset, var) != 1:
        return False
    form = index.affine(offset)
    others = [coef for atom, coef in form.terms.items() if not (isinstance(atom, ex.Var) and atom.name == var)]
    return form.constant % width == 0 and all(coef % width == 0 for coef in others)


def vector_loads(row: RowReduction, loop: loop_ir.Loop, width: int) -> tuple[loop_ir.Load, ...]:
    """The distinct loads of ``loop`` over the row that read one vector per ``width`` elements."""
    found = (load for s in loop.body for e in loop_ir.expressions(s) for load in unconditional_loads(e))
    return tuple(dict.fromkeys(
        load for load in found
        if is_vector_access(row.kernel, load.buffer, load.index, load.dtype, loop.var, width)
    ))


def vector_stores(row: RowReduction, loop: loop_ir.Loop, width: int) -> tuple[loop_ir.Store, ...]:
    """The stores of ``loop`` over the row that write one vector per ``width`` elements."""
    return tuple(
        s for s in loop.body if isinstance(s, loop_ir.Store)
        and is_vector_access(row.kernel, s.buffer, s.index, row.kernel.buffer(s.buffer).type.dtype, loop.var, width)
    )


def row_itemsizes(row: RowReduction) -> list[int]:
    """The element sizes of every buffer a loop over the row reads or writes along the row."""
    sizes = []
    for phase in row.phases:
        loop = phase.loop
        if loop is None:
            continue
        for s in loop.body:
            if isinstance(s, loop_ir.Store):
                sizes.append(row.kernel.buffer(s.buffer).type.dtype.itemsize)
            for load in loop_ir.loads((s,)):
                if any(loop.var in ex.free_vars(i) for i in load.index):
                    sizes.append(row.kernel.buffer(load.buffer).type.dtype.itemsize)
    return sizes


def has_vector_access(row: RowReduction, width: int) -> bool:
    """Whether every loop over the row divides into vectors of ``width`` and some access moves them whole."""
    if width < 2 or any(p.loop.extent % width for p in row.phases if p.loop is not None):
        return False
    return any(vector_loads(row, p.loop, width) or vector_stores(row, p.loop, width)
               for p in row.phases if p.loop is not None)


def default_width(row: RowReduction) -> int:
    """16 bytes of the widest element the row's loops move, halved until the row divides
    into such vectors and some access moves them whole; 1 where none does."""
    sizes = row_itemsizes(row)
    width = VECTOR_BYTES // max(sizes) if sizes else 1
    while width > 1 and not has_vector_access(row, width):
        width //= 2
    return max(width, 1)


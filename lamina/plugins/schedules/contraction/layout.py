"""The layout a contraction's writer gives a block: its tiles, the Kernel IR names of its
indices and arrays, and which rows and columns each thread owns.

The writer builds one ``BlockLayout`` and hands it to whatever writes part of the kernel for
it (the ``mma.sync`` steps, the row reductions of ``matmul_row_reduction``), so that those
read the block's layout from a record rather than from the writer.
"""

from __future__ import annotations

import math

import attrs

from lamina.core.ir import expr as ex, index, kernel_ir, tile_ir
from lamina.core.ir.expr import Expr
from lamina.plugins.schedules.contraction.recognise import Contraction


class KernelNames:
    """Kernel IR names that differ from the kernel's buffers and Loop IR variables."""

    def __init__(self, taken: set[str]):
        self.taken = set(taken)

    def fresh(self, base: str) -> str:
        name, n = base, 0
        while name in self.taken:
            n += 1
            name = f"{base}_{n}"
        self.taken.add(name)
        return name


SHARED_ALIGNMENT = 16
"""Each shared array starts on a 16-byte boundary, as 16-byte copies into it need."""


def dynamic_shared_bytes(arrays: list[kernel_ir.Array], static_shared_bytes: int) -> int:
    """The shared memory a launch asks for: the block's shared arrays, each from a 16-byte
    boundary, where they exceed the ``static_shared_bytes`` a kernel may declare; else 0."""
    shared = sum(-(-a.bytes // SHARED_ALIGNMENT) * SHARED_ALIGNMENT for a in arrays if a.space == "shared")
    return shared if shared > static_shared_bytes else 0


def batch_coordinates(c: Contraction, batch: ex.Var) -> dict[str, Expr]:
    """The batch variables of a block, from its flattened index ``batch`` (blockIdx.z)."""
    if not c.batch:
        return {}
    extents = tuple(c.extents[v] for v in c.batch)
    coords = index.delinearize(batch, extents, {batch.name: math.prod(extents)})
    return dict(zip(c.batch, coords))


def first_owned(thread: Expr, binding: tile_ir.AxisBinding) -> Expr:
    """The first row or column of the block tile that ``thread`` owns along ``binding``."""
    return thread * binding.group if binding.group > 1 else thread


def owned(first: Expr, binding: tile_ir.AxisBinding, i: int) -> Expr:
    """Where the ``i``-th row or column that a thread owns along ``binding`` lies, from its first
    one: runs of ``group`` adjacent ones, ``threads * group`` apart."""
    run, step = divmod(i, binding.group)
    offset = run * binding.threads * binding.group + step
    return first + offset if offset else first


def all_of(parts: list[Expr | None]) -> Expr | None:
    """The conjunction of the guards that are not None (None: no guard at all)."""
    result = None
    for p in parts:
        if p is not None:
            result = p if result is None else ex.op("and", result, p)
    return result


def any_of(parts: list[Expr | None]) -> Expr | None:
    """The disjunction of the distinct conditions that are not None (None: there are none)."""
    found = list(dict.fromkeys(p for p in parts if p is not None))
    result = found[0] if found else None
    for p in found[1:]:
        result = ex.op("or", result, p)
    return result


def below(a: Expr, bound: int | Expr, ranges: index.Ranges) -> Expr | None:
    """The guard ``a < bound``, or None where the variables' ranges already keep it true (never
    where the bound is a size known only at run time)."""
    if isinstance(bound, Expr):
        return ex.op("lt", a, bound)
    _, highest = index.bounds(index.affine(a, ranges), ranges)
    return None if highest is not None and highest < bound else ex.op("lt", a, bound)


@attrs.frozen
class BlockLayout:
    """A block of a contraction's kernel as its writer laid it out.

    ``rows`` and ``cols`` bind the product's rows (m) and columns (n) to the block's threads
    and registers; the block runs ``k_tiles`` k-tiles of ``block_k``, each thread of a k-split
    ``k_slice`` of them, ``threads`` threads in all. ``tid``, ``kk`` (the step of k within a
    k-tile) and ``batch`` are Kernel IR variables; ``thread_row``, ``thread_col``, ``block_row``
    and ``block_col`` the thread's and block's coordinates (CUDA's indices, or variables that
    the prologue computes where warps or blocks are rearranged); ``batch_env`` the batch
    variables of the block. ``acc`` is the register tile of accumulators and ``tiles`` the
    shared array of each staged operand (by its text); ``names`` gives further fresh names.
    """

    contraction: Contraction
    rows: tile_ir.AxisBinding
    cols: tile_ir.AxisBinding
    grid: dict[str, int]
    threads: int
    block_k: int
    k_slice: int
    tid: ex.Var
    kk: ex.Var
    batch: ex.Var
    thread_row: Expr
    thread_col: Expr
    block_row: Expr
    block_col: Expr
    batch_env: dict[str, Expr]
    acc: str
    tiles: dict[str, str]
    names: KernelNames = attrs.field(eq=False)

    def row_in_block(self, a: int) -> Expr:
        """The block tile's row that holds the thread's ``a``-th row."""
        return owned(first_owned(self.thread_row, self.rows), self.rows, a)

    def k_guard(self, k: Expr, ranges: index.Ranges) -> Expr | None:
        """The guard ``k < K`` where the last k-tile runs past the reduction, else None."""
        c = self.contraction
        return below(k, c.reduce_extent, ranges) if c.reduce_extent % self.block_k else None

    def accumulator(self, a: int, b: int) -> kernel_ir.Load:
        return kernel_ir.Load(self.acc, (ex.const(a), ex.const(b)), self.contraction.acc_dtype)


def store_width(c: Contraction, fragment_width: int) -> int:
    """How many adjacent outputs one epilogue store writes: a thread's run of ``fragment_width``
    columns where every store's columns are contiguous and each run starts aligned and lies
    wholly inside or outside the output, else 1. A store may split the columns into digits by a
    multiple of the run (``column // 64`` and ``column % 64``, a projection's columns stored as
    heads and features): within an aligned run the quotient stays and the remainder moves by one."""
    if fragment_width == 1 or c.extents[c.n] % fragment_width:
        return 1
    for store in c.epilogue:
        buffer = c.kernel.buffer(store.buffer).type
        if fragment_width * buffer.dtype.itemsize not in kernel_ir.VECTOR_BYTES:
            return 1
        form = index.affine(index.linearize(store.index, buffer.shape))
        moving, fixed = 0, [form.constant]
        for atom, coef in form.terms.items():
            role = _role_in_a_run(atom, c.n, fragment_width)
            if role is None:
                return 1
            if role == "moves":
                moving += coef
            else:
                fixed.append(coef)
        if moving != 1 or any(step % fragment_width for step in fixed):
            return 1
    return fragment_width


def _role_in_a_run(atom: Expr, column: str, width: int) -> str | None:
    """How an index atom changes along an aligned run of ``width`` columns: ``moves`` one by one
    with the column (the column, or its remainder by a multiple of ``width``), ``stays`` (anything
    of other variables, such as a batch's row split into sequence and position, or the column's
    quotient by such a multiple), or None where it does neither."""
    if column not in ex.free_vars(atom):
        return "stays"
    if isinstance(atom, ex.Var):
        return "moves"
    if isinstance(atom, ex.Op) and atom.op in ("mod", "floordiv") and isinstance(atom.args[0], ex.Var) \
            and atom.args[0].name == column and isinstance(atom.args[1], ex.Const) and atom.args[1].value % width == 0:
        return "moves" if atom.op == "mod" else "stays"
    return None

"""Which fused attention kernels the decode schedule runs: a few query rows per key range.

In a decoding step each (batch, head) has one query (or a few) against a long key-value cache,
and the query heads of a group (Llama's, Qwen's) read the same keys and values. The schedule
gives each block the ``group_rows`` consecutive rows of the output that read the same keys and
values and a range of keys, copies that range into shared memory once for all of them, and
combines the ranges afterwards. So the recogniser finds that run of rows (the rows whose keys'
and values' first elements are the same, checked for every row) and checks that the keys and
values can be copied 16 bytes at a time: contiguous along the depth and the features, each row
of them starting on a 16-byte boundary.
"""

from __future__ import annotations

import math

import attrs

from lamina.core.ir import dtypes, expr as ex, index, loop_ir, sizes
from lamina.core.ir.expr import Expr
from lamina.plugins.schedules.attention.loops import (AttentionLoops, AttentionSizes, NotAttention, attention_loops,
                                                      is_op, query_and_key)

COPY_BYTES = 16
"""One cp.async copy: the keys and values move 16 bytes at a time."""
MAX_GROUP_ROWS = 16
"""Rows a block holds: each thread keeps a dot product (and an output run) per row in registers."""
MAX_FEATURES = 256


@attrs.frozen
class DecodeAttention(AttentionSizes):
    """A fused attention kernel as the decode schedule runs it: ``query`` (the dot product's
    factor that does not move with the key, a float32 expression of the rows and the depth
    variable), the keys' and values' loads, and the rows that share them."""

    loops: AttentionLoops
    query: Expr
    keys: loop_ir.Load
    values: loop_ir.Load
    group_rows: int

    @property
    def kernel(self) -> loop_ir.Kernel:
        return self.loops.kernel

    @property
    def dtype(self) -> dtypes.DType:
        return self.keys.dtype

    @property
    def vector(self) -> int:
        """Elements of one 16-byte copy."""
        return COPY_BYTES // self.dtype.itemsize

    @property
    def rows_extent(self) -> int:
        return math.prod(loop.extent for loop in self.loops.rows)

    @property
    def row_groups(self) -> int:
        return self.rows_extent // self.group_rows


def row_coordinates(rows: tuple[loop_ir.Loop, ...], row: Expr) -> dict[str, Expr]:
    """Each row loop's variable at flattened row ``row`` (row-major over the loops)."""
    return dict(zip((loop.var for loop in rows), index.delinearize(row, tuple(loop.extent for loop in rows))))


def _copied(factor: Expr, moving: str, where: str) -> loop_ir.Load:
    """The load that ``factor`` (``f32(load)``, or a float32 load) reads, where it moves with ``moving``."""
    load = factor.args[0] if is_op(factor, "cast", 1) and factor.dtype == dtypes.float32 else factor
    if not isinstance(load, loop_ir.Load) or moving not in set().union(*(ex.free_vars(i) for i in load.index)):
        raise NotAttention(f"{where}: the keys and values must be read as they lie, element by element")
    return load


def flat_offset(kernel: loop_ir.Kernel, load: loop_ir.Load, env: dict[str, Expr]) -> Expr:
    """Where ``load`` reads in its buffer's elements, flattened, at ``env``'s variables."""
    shape = kernel.buffer(load.buffer).type.shape
    return index.simplify(index.linearize(tuple(ex.substitute(i, env) for i in load.index), shape))


def _check_rows_of_16_bytes(kernel: loop_ir.Kernel, load: loop_ir.Load, along: str, key: str, vector: int,
                            where: str) -> None:
    offset = flat_offset(kernel, load, {})
    if index.coefficient(offset, along) != 1:
        raise NotAttention(f"{where}: {load.buffer} is not contiguous along {along}")
    step = index.coefficient(offset, key)
    if step is None or step % vector:
        raise NotAttention(f"{where}: the rows of {load.buffer} do not start on 16-byte boundaries")


def _group_rows(a: AttentionLoops, keys: loop_ir.Load, values: loop_ir.Load, where: str) -> int:
    """The run of consecutive rows that read the same keys and values (1 where none share).
    More than ``MAX_GROUP_ROWS`` rows reading the same keys, consecutive or not, are a prompt's
    queries, not a decoding step's: ``NotAttention``."""
    kernel, rows = a.kernel, a.rows
    if sizes.is_symbolic(tuple(loop.extent for loop in rows)):
        raise NotAttention(f"{where}: its rows are counted only at run time (a prompt's queries); the decode "
                           f"schedule holds at most {MAX_GROUP_ROWS}")
    zero = {a.key_var: ex.const(0), a.dot_loop.var: ex.const(0), a.values_loop.var: ex.const(0),
            a.feature_loop.var: ex.const(0)}
    moving = ex.free_vars(flat_offset(kernel, keys, zero)) | ex.free_vars(flat_offset(kernel, values, zero))
    if math.prod(loop.extent for loop in rows if loop.var not in moving) > MAX_GROUP_ROWS:
        # rows that differ only along loops the keys do not move with read the same keys
        raise NotAttention(f"{where}: more than {MAX_GROUP_ROWS} rows read the same keys (a prompt's queries); "
                           f"the decode schedule holds at most {MAX_GROUP_ROWS}")
    starts = []
    readers: dict[tuple, int] = {}
    for row in range(math.prod(loop.extent for loop in rows)):
        env = {**row_coordinates(rows, ex.const(row)), **zero}
        first = (flat_offset(kernel, keys, env), flat_offset(kernel, values, env))
        if any(not sizes.is_symbol_name(name) for e in first for name in ex.free_vars(e)):
            raise NotAttention(f"{where}: where a row's keys and values start is not known")
        starts.append(first)  # numbers, or expressions of sizes known at run time (a growing cache's)
        readers[starts[-1]] = readers.get(starts[-1], 0) + 1
        if readers[starts[-1]] > MAX_GROUP_ROWS:
            raise NotAttention(f"{where}: more than {MAX_GROUP_ROWS} rows read the same keys (a prompt's queries); "
                               f"the decode schedule holds at most {MAX_GROUP_ROWS}")
    runs = [1]
    for before, after in zip(starts, starts[1:]):
        if after == before:
            runs[-1] += 1
        else:
            runs.append(1)
    if len(set(runs)) != 1 or len(set(starts)) != len(runs):
        return 1
    return runs[0]


def analyse(kernel: loop_ir.Kernel) -> DecodeAttention:
    """The decode attention in ``kernel``, or ``NotAttention`` saying why the schedule cannot run it."""
    a = attention_loops(kernel)
    where = f"loop kernel {kernel.name}"
    query, key = query_and_key(a, where)
    keys = _copied(key, a.key_var, where)
    values = _copied(a.value, a.values_loop.var, where)
    if keys.dtype != values.dtype or keys.dtype not in (dtypes.bfloat16, dtypes.float16, dtypes.float32):
        raise NotAttention(f"{where}: the keys and values are not both bf16, fp16 or float32")
    vector = COPY_BYTES // keys.dtype.itemsize
    depth, features = a.dot_loop.extent, a.feature_loop.extent
    if depth % vector or features % vector or features > MAX_FEATURES or depth > MAX_FEATURES:
        raise NotAttention(f"{where}: {depth} and {features} features must be multiples of {vector} up to "
                           f"{MAX_FEATURES}")
    _check_rows_of_16_bytes(kernel, keys, a.dot_loop.var, a.key_var, vector, where)
    _check_rows_of_16_bytes(kernel, values, a.feature_loop.var, a.values_loop.var, vector, where)
    group = _group_rows(a, keys, values, where)
    if group > MAX_GROUP_ROWS:
        raise NotAttention(f"{where}: {group} rows read the same keys; the decode schedule holds at most "
                           f"{MAX_GROUP_ROWS}")
    return DecodeAttention(a, query, keys, values, group)

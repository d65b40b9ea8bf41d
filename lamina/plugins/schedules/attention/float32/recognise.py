"""Which fused attention kernels the float32 attention schedule runs: a prompt's queries.

The rows of the output (batch, head, query) are split into the loops that move the keys and
values (the batch, the key-value head: a *group*) and the innermost loops that do not (the
queries of a group, all reading the same keys). A block takes ``block_queries`` consecutive
queries of one group; the keys and values are float32 loads, contiguous along the features
and copied 16 bytes at a time, and the query factor is a float32 expression of the row and the
feature, staged once per block.
"""

from __future__ import annotations

import math

import attrs

from lamina.core.ir import dtypes, expr as ex, index, loop_ir, sizes
from lamina.core.ir.expr import Expr
from lamina.plugins.schedules.attention.decode.recognise import COPY_BYTES, flat_offset, row_coordinates
from lamina.plugins.schedules.attention.loops import (AttentionLoops, AttentionSizes, NotAttention, attention_loops,
                                                      query_and_key)
from lamina.plugins.schedules.attention.recognise import visible_bound

MMA_K = 8
"""The features of one ``mma.sync`` m16n8k8 step: the depth and the features must be multiples."""
MAX_FEATURES = 256
MAX_GROUPS = 65535
"""Groups run along the grid's y, which holds at most this many blocks."""


@attrs.frozen
class PromptAttention(AttentionSizes):
    """A fused float32 attention kernel as this schedule runs it: ``query`` (the dot product's
    factor that does not move with the key, an expression of the rows and the depth variable),
    the keys' and values' loads, and the row loops split into ``groups`` and ``queries``."""

    loops: AttentionLoops
    query: Expr
    keys: loop_ir.Load
    values: loop_ir.Load
    groups: tuple[loop_ir.Loop, ...]
    queries: tuple[loop_ir.Loop, ...]

    @property
    def kernel(self) -> loop_ir.Kernel:
        return self.loops.kernel

    @property
    def groups_extent(self) -> int:
        return math.prod(loop.extent for loop in self.groups)

    @property
    def queries_extent(self) -> int:
        return math.prod(loop.extent for loop in self.queries)

    def rows(self, group: Expr, query: Expr) -> dict[str, Expr]:
        """Each row loop's variable at query ``query`` of group ``group``."""
        return {**row_coordinates(self.groups, group), **row_coordinates(self.queries, query)}

    def last_visible_key(self, query: Expr) -> Expr | None:
        """The last key that query ``query`` of a group sees where the score hides every later key
        (causal attention), else None; only where the queries are one loop."""
        if len(self.queries) != 1:
            return None
        return visible_bound(self.loops.score, self.loops.key_var, self.queries[0].var, query, "last")


def _float32_load(factor: Expr, moving: str, where: str) -> loop_ir.Load:
    if not (isinstance(factor, loop_ir.Load) and factor.dtype == dtypes.float32
            and moving in set().union(*(ex.free_vars(i) for i in factor.index))):
        raise NotAttention(f"{where}: the keys and values must be float32 read as they lie")
    return factor


def _rows_of_16_bytes(kernel: loop_ir.Kernel, load: loop_ir.Load, along: str, key: str, where: str) -> Expr:
    """The load's offset with the key and the feature at zero, having checked that it is
    contiguous along the feature and that its rows start on 16-byte boundaries."""
    offset = flat_offset(kernel, load, {})
    vector = COPY_BYTES // 4
    step = index.coefficient(offset, key)
    if index.coefficient(offset, along) != 1 or step is None or step % vector:
        raise NotAttention(f"{where}: {load.buffer} is not read in rows of whole 16-byte runs along its features")
    return flat_offset(kernel, load, {key: ex.const(0), along: ex.const(0)})


def analyse(kernel: loop_ir.Kernel) -> PromptAttention:
    """The prompt attention in ``kernel``, or ``NotAttention`` saying why the schedule cannot run it."""
    a = attention_loops(kernel)
    where = f"loop kernel {kernel.name}"
    if a.rounding is not None:
        raise NotAttention(f"{where}: its probabilities are rounded to {a.rounding}; this schedule is for float32")
    if sizes.is_symbolic((a.keys_extent, *(loop.extent for loop in a.rows))):
        raise NotAttention(f"{where}: its sizes are known only at run time")
    query, key = query_and_key(a, where)
    keys = _float32_load(key, a.key_var, where)
    values = _float32_load(a.value, a.values_loop.var, where)
    depth, features = a.dot_loop.extent, a.feature_loop.extent
    if depth % MMA_K or features % MMA_K or max(depth, features) > MAX_FEATURES:
        raise NotAttention(f"{where}: {depth} and {features} features must be multiples of {MMA_K} up to "
                           f"{MAX_FEATURES}")
    key_start = _rows_of_16_bytes(kernel, keys, a.dot_loop.var, a.key_var, where)
    value_start = _rows_of_16_bytes(kernel, values, a.feature_loop.var, a.values_loop.var, where)
    moves = ex.free_vars(key_start) | ex.free_vars(value_start)
    split = len(a.rows)
    while split > 0 and a.rows[split - 1].var not in moves:
        split -= 1
    groups, queries = a.rows[:split], a.rows[split:]
    if not queries or math.prod(loop.extent for loop in queries) == 1:
        raise NotAttention(f"{where}: no row loop reads the same keys as the next (a decoding step's rows, not a "
                           "prompt's queries)")
    result = PromptAttention(a, query, keys, values, tuple(groups), tuple(queries))
    if result.groups_extent > MAX_GROUPS:
        raise NotAttention(f"{where}: {result.groups_extent} groups of queries, more than the grid's "
                           f"{MAX_GROUPS} along y")
    return result

"""Recognising row reductions: kernels that reduce each row of a tensor, then use the result.

The fusion rules write norms, softmax, sums and means as one nest of parallel loops
(one iteration per row) around a sequence of phases over the same row::

    for i0 in parallel(rows):
      acc0 = -inf                     Init: the identity of its reduction
      for r0 in reduce(n):            a reduction: Accumulates only
        acc0 = max(acc0, x[i0, r0])
      acc1 = 0.0
      for r1 in reduce(n):            another, reading the first one's result
        acc1 += exp(x[i0, r1] - acc0)
      for i1 in serial(n):            the epilogue: Stores only
        out[i0, i1] = exp(x[i0, i1] - acc0) / acc1
      total[i0] = acc1                a Store per row

Every loop over the row reads the row contiguously (the column variable has stride 1 in
every access that uses it), so that threads striding over the row read adjacent elements;
only the epilogue may also gather elements of the row at columns no affine function of its
variable (RoPE's rotated half after a query norm). The reductions run over one length; an
epilogue may run over another (OPT's positions, a cumulative sum of the padding mask over
512 tokens, read by a gather of 768 features per token); the row is then read from memory
by each loop, not kept in registers. No reduction may combine two operands that follow
different rows: matmuls are the contraction schedule's. A reduction whose rows all read the
same elements (a cumulative sum's triangle) is a row reduction whose reads hit the cache.
"""

from __future__ import annotations

import math
from typing import Iterator

import attrs

from lamina.core.ir import dtypes, expr as ex, index, loop_ir, sizes
from lamina.core.ir.names import fresh_name
from lamina.plugins.schedules.loop_to_kernel import split_parallel_nest

COLUMN = "column"
"""The name a row access's column variable takes in its ``key``."""


class NotARowReduction(Exception):
    """The kernel is not shaped like a row reduction; the message says why."""


@attrs.frozen
class Phase:
    """One loop over the row (``reduce``: Accumulates; otherwise Stores), or one
    row-level statement (``loop`` is None)."""

    statement: loop_ir.Stmt

    @property
    def loop(self) -> loop_ir.Loop | None:
        return self.statement if isinstance(self.statement, loop_ir.Loop) else None

    @property
    def reduces(self) -> bool:
        return self.loop is not None and self.loop.kind == "reduce"


@attrs.frozen
class RowReduction:
    """What the schedule needs to know about a row-reduction kernel."""

    kernel: loop_ir.Kernel
    rows: tuple[loop_ir.Loop, ...] = attrs.field(converter=tuple)
    length: int
    """The longest loop over the row: what the threads of a row are sized for."""
    phases: tuple[Phase, ...] = attrs.field(converter=tuple)
    accumulators: dict[str, tuple[str, dtypes.DType]]
    """Reduced accumulator -> (its accumulation, its type)."""
    readers: dict[tuple, int]
    """Each row access (see ``key``) -> how many loops over the row read it."""
    column_name: str

    @property
    def row_count(self) -> "int | ex.Expr":
        return sizes.numel([loop.extent for loop in self.rows])

    @property
    def reduce_vars(self) -> tuple[str, ...]:
        return tuple(p.loop.var for p in self.phases if p.reduces)

    @property
    def reduce_length(self) -> int:
        return next(p.loop.extent for p in self.phases if p.reduces)

    @property
    def one_length(self) -> bool:
        """Whether every loop over the row has the same extent: only then can a thread keep
        the row's elements in registers from one loop to the next."""
        return all(p.loop.extent == self.length for p in self.phases if p.loop is not None)

    @property
    def shared_reads(self) -> tuple[tuple, ...]:
        """Row accesses read by more than one loop over the row: those worth keeping in registers."""
        return tuple(key for key, count in self.readers.items() if count > 1)

    @property
    def reads_after_a_reduction(self) -> tuple[tuple, ...]:
        """Row accesses that only one loop reads, after the first reduction, at columns that
        no accumulator decides (RMSNorm's weight): a row kept in registers can load them with
        its first pass, so that their latency passes beside the row's instead of after the
        reductions."""
        found: dict[tuple, None] = {}
        reduced = False
        for phase in self.phases:
            loop = phase.loop
            if loop is not None and reduced:
                for load in _row_loads(loop):
                    if not set().union(*map(ex.free_vars, load.index)) & set(self.accumulators):
                        found[self.key(load, loop.var)] = None
            reduced = reduced or phase.reduces
        return tuple(key for key in found if self.readers.get(key) == 1)

    def key(self, load: loop_ir.Load, var: str) -> tuple:
        """``load`` in the loop over ``var``, with that variable renamed: the same element of
        the row read by two loops has one key."""
        column = ex.Var(self.column_name)
        return (load.buffer, tuple(ex.substitute(i, {var: column}) for i in load.index), load.dtype)


def analyse(kernel: loop_ir.Kernel) -> RowReduction:
    """The row-reduction structure of ``kernel``, or ``NotARowReduction`` saying what does not fit."""
    if len(kernel.body) > 1 and all(isinstance(s, loop_ir.Loop) and s.kind == "parallel" for s in kernel.body):
        raise NotARowReduction(f"kernel {kernel.name} runs {len(kernel.body)} nests one after another: each is "
                               "a row reduction of its own (pieces)")
    rows, inner = split_parallel_nest(kernel.body)
    row_vars = {loop.var for loop in rows}
    phases, accumulators, lengths = [], {}, set()
    initial: dict[str, loop_ir.Init] = {}
    for s in inner:
        if isinstance(s, loop_ir.Init):
            initial[s.acc] = s
        elif isinstance(s, loop_ir.Accumulate):
            raise NotARowReduction(f"accumulation into {s.acc} outside a loop over the row")
        elif isinstance(s, loop_ir.Loop):
            lengths.add(s.extent)
            if s.kind == "reduce":
                for a in s.body:
                    if not isinstance(a, loop_ir.Accumulate):
                        raise NotARowReduction(f"reduce loop {s.var} holds a {type(a).__name__}, not only Accumulates")
                    _check_identity(a, initial.get(a.acc))
                    if a.acc in accumulators:
                        raise NotARowReduction(f"accumulator {a.acc} is reduced by two loops")
                    accumulators[a.acc] = (a.op, initial[a.acc].value.dtype)
            elif not all(isinstance(b, loop_ir.Store) for b in s.body):
                raise NotARowReduction(f"loop {s.var} over the row holds more than Stores")
        phases.append(Phase(s))
    if not accumulators:
        raise NotARowReduction("no reduce loop inside the parallel loops")
    unreduced = sorted(set(initial) - set(accumulators))
    if unreduced:
        raise NotARowReduction(f"accumulators {', '.join(unreduced)} are declared but never reduced")
    reduce_lengths = {p.loop.extent for p in phases if p.reduces}
    if len(reduce_lengths) != 1:
        raise NotARowReduction(f"the reductions run over rows of different lengths {sorted(reduce_lengths)}")
    if sizes.is_symbolic(tuple(lengths)) and len(lengths) > 1:
        raise NotARowReduction(f"the loops over the row run over {', '.join(map(str, lengths))} elements, lengths "
                               "known only at run time that the schedule cannot order")
    length = max(lengths) if len(lengths) > 1 else next(iter(lengths))
    taken = {b.name for b in kernel.inputs + kernel.outputs} | row_vars
    taken |= {s.var for s in loop_ir.statements(kernel.body) if isinstance(s, loop_ir.Loop)}
    result = RowReduction(kernel, rows, length, phases, accumulators, {}, fresh_name(COLUMN, taken))
    return attrs.evolve(result, readers=_row_accesses(result))


def _check_identity(a: loop_ir.Accumulate, init: loop_ir.Init | None) -> None:
    """Threads start from the Init value and combine their partial results: it must be the
    identity of the accumulation, or it would count once per thread."""
    if init is None:
        raise NotARowReduction(f"accumulator {a.acc} has no Init before its reduce loop")
    value = init.value
    if not isinstance(value, ex.Const) or value.dtype == dtypes.bool_:
        raise NotARowReduction(f"accumulator {a.acc} starts from {loop_ir.format_value(value)}, not a constant identity")
    identity = {"sum": 0, "prod": 1, "max": -math.inf, "min": math.inf}.get(a.op)
    if not value.dtype.is_float and a.op in ("max", "min"):  # an integer's extremes: an any() is an int32 max
        identity = dtypes.integer_range(value.dtype)[0 if a.op == "max" else 1]
    if identity is None or value.value != identity:
        raise NotARowReduction(f"accumulator {a.acc} starts from {value.value}, not the identity of {a.op}")


def _row_accesses(row: RowReduction) -> dict[tuple, int]:
    """Count the loops reading each row access, checking that rows are read contiguously and that
    no reduction is a matmul's."""
    readers: dict[tuple, int] = {}
    row_vars = {loop.var for loop in row.rows if loop.extent != 1}
    writes_rows = any(isinstance(s, loop_ir.Store) for phase in row.phases if phase.loop is not None
                      for s in phase.loop.body)
    for phase in row.phases:
        loop = phase.loop
        if loop is None:
            continue
        seen: dict[tuple, None] = {}
        for s in loop.body:
            if isinstance(s, loop_ir.Store):
                _check_contiguous(row.kernel, s.buffer, s.index, loop.var, "writes")
        for node in _row_loads(loop):
            if not _read_apart(row.kernel, node, loop.var, writes_rows):
                _check_contiguous(row.kernel, node.buffer, node.index, loop.var, "reads")
            seen[row.key(node, loop.var)] = None
        if loop.kind == "reduce" and _combines_two_sides(loop, row_vars):
            raise NotARowReduction(f"reduce loop {loop.var} combines operands that follow different rows, as a "
                                   "matmul does")
        for key in seen:
            readers[key] = readers.get(key, 0) + 1
    return readers


def _combines_two_sides(loop: loop_ir.Loop, row_vars: set[str]) -> bool:
    """Whether two of the loop's reads along it follow different row variables, each one the
    other does not (``x[i, r] * w[j, r]``); reads that follow every row, or none, do not."""
    moving = [set().union(*map(ex.free_vars, node.index)) & row_vars for node in _row_loads(loop)]
    return any(a - b and b - a for a in moving for b in moving)


def _row_loads(loop: loop_ir.Loop) -> Iterator[loop_ir.Load]:
    """The loads in ``loop`` whose index moves with it."""
    for s in loop.body:
        for e in loop_ir.expressions(s):
            for node in ex.walk(e):
                if isinstance(node, loop_ir.Load) and _uses(node.index, loop.var):
                    yield node


def _uses(idx: tuple, var: str) -> bool:
    return any(var in ex.free_vars(i) for i in idx)


def _read_apart(kernel: loop_ir.Kernel, load: loop_ir.Load, var: str, writes_rows: bool) -> bool:
    """Whether ``load`` in the loop over ``var`` reads at columns that are no affine function of it
    (RoPE's rotated half, ``x[i % 64 + 64]``; T5's position bias, a table read at a bucket of the
    distance between query and key) or, in a kernel that writes its rows (a norm), columns that
    lie apart (Whisper's norm over the channels of a convolution's output, stored channel by
    channel): each element is then one load of its own, not a stride threads walk together. A
    column sum, or a matmul, writes no rows: other schedules read its columns together."""
    offset = index.linearize(load.index, kernel.buffer(load.buffer).type.shape)
    step = index.coefficient(offset, var)
    return step is None or (writes_rows and step != 1)


def _check_contiguous(kernel: loop_ir.Kernel, buffer: str, idx: tuple, var: str, verb: str) -> None:
    if not _uses(idx, var):
        if verb == "writes":
            raise NotARowReduction(f"loop {var} writes the same element of {buffer} at every step")
        return
    offset = index.linearize(idx, kernel.buffer(buffer).type.shape)
    if index.coefficient(offset, var) != 1:
        raise NotARowReduction(f"loop {var} {verb} {buffer} with a stride other than 1 along the row")


def pieces(kernel: loop_ir.Kernel) -> tuple[RowReduction, ...]:
    """The row reductions that ``kernel`` runs one after another: itself, or each of its nests, each
    a kernel of the buffers it reads and writes. The nests must have rows counted when compiling,
    and rows of one length, so that one setting serves them all."""
    if len(kernel.body) == 1:
        return (analyse(kernel),)
    if not all(isinstance(s, loop_ir.Loop) and s.kind == "parallel" for s in kernel.body):
        raise NotARowReduction("a kernel of several statements that are not all nests of parallel loops")
    found = tuple(analyse(_alone(kernel, nest)) for nest in kernel.body)
    if len({piece.length for piece in found}) > 1:
        raise NotARowReduction("nests whose rows have different lengths")
    if any(sizes.is_symbolic(piece.row_count) for piece in found):
        raise NotARowReduction("nests one after another whose rows are counted only at run time")
    return found


def _alone(kernel: loop_ir.Kernel, nest: loop_ir.Loop) -> loop_ir.Kernel:
    """``nest`` as a kernel of its own: the buffers it loads and those it stores."""
    loaded, stored = set(), set()
    for s in loop_ir.statements((nest,)):
        if isinstance(s, loop_ir.Store):
            stored.add(s.buffer)
        for e in loop_ir.expressions(s):
            loaded |= {node.buffer for node in ex.walk(e) if isinstance(node, loop_ir.Load)}
    return attrs.evolve(kernel, body=(nest,), inputs=tuple(b for b in kernel.inputs if b.name in loaded),
                        outputs=tuple(b for b in kernel.outputs if b.name in stored))

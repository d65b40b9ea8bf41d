"""Recognising a contraction (a matmul, batched or with a fused prologue and epilogue) in Loop IR.

A contraction is a perfect nest of parallel loops around one sum over a reduction
variable ``r``, followed by stores of the sum. Every load that moves with ``r`` is an
operand tile: it moves with the output rows (M side) or the output columns (N side),
never both, which is what lets a block stage one strip of each operand in shared
memory and combine every row of the one with every column of the other. A sum guarded
to end early in some blocks (a shorter split-K slice, ``slices``) is read as the plain
sum and a ``SliceBound``.

A kernel may also sum two products at once over the same rows and reduction, of the same
row operand by two column operands: a gated MLP's gate and up projections, which the
``pair_gated_products`` rule puts in one kernel so that its epilogue (``silu(gate) * up``)
reads both sums from registers. The second sum is the contraction's ``paired``; only the
16-bit Hopper GEMM runs such a kernel, so ``analyse`` finds it only where asked to
(``joined=True``), and every other caller sees a kernel that is no contraction.
"""

from __future__ import annotations

import functools
import itertools
from typing import Iterator

import attrs

from lamina.core.errors import ScheduleError
from lamina.core.ir import dtypes, expr as ex, index, loop_ir, sizes
from lamina.core.ir.dtypes import DType
from lamina.core.ir.expr import Expr
from lamina.plugins.schedules.contraction.slices import SliceBound, read_guard
from lamina.plugins.schedules.loop_to_kernel import split_parallel_nest


class NotAContraction(ScheduleError):
    """The kernel does not have the shape of a contraction; the message says why."""


@attrs.frozen
class Operand:
    """A load that moves with the reduction variable, and the side of the output it follows.

    ``side`` is ``m`` (it moves with the output rows), ``n`` (with the columns) or ``k``
    (with the reduction variable alone, like the bias of a prologue ``x + bias``).
    """

    load: loop_ir.Load
    side: str

    @property
    def text(self) -> str:
        return _formatted(self.load)


@functools.lru_cache(maxsize=4096)
def _formatted(load: loop_ir.Load) -> str:
    """A load as Tile IR prints it; the cost model asks for it once per candidate setting."""
    return loop_ir.format_value(load)


@attrs.frozen
class PairedSum:
    """The second sum of a kernel that sums two products at once: accumulator ``acc`` sums
    ``value``, the first sum's term with its column operand's load replaced by ``operand``'s."""

    acc: str
    value: Expr
    operand: Operand


@attrs.frozen
class Piece:
    """One product of a kernel that runs several of one row operand side by side: its own
    contraction (its nest alone, its columns numbered from 0) and where its columns start among
    the joined kernel's."""

    first_column: int
    contraction: Contraction

    @property
    def columns(self) -> int:
        return self.contraction.extents[self.contraction.n]

    @property
    def column_operand(self) -> Operand:
        return next(o for o in self.contraction.operands if o.side == "n")


@attrs.frozen
class Contraction:
    """The parts of a contraction kernel: output rows ``m``, columns ``n`` (contiguous in the
    output), block-uniform ``batch`` variables, the sum and the stores that follow it;
    ``slice_bound``, where the sum runs only while ``start + r < end`` (``start`` a function
    of the batch variables), else None."""

    kernel: loop_ir.Kernel
    extents: dict[str, sizes.Size]
    m: str
    n: str
    batch: tuple[str, ...] = attrs.field(converter=tuple)
    reduce_var: str
    acc: str
    acc_dtype: DType
    init: Expr
    value: Expr
    epilogue: tuple[loop_ir.Store, ...] = attrs.field(converter=tuple)
    operands: tuple[Operand, ...] = attrs.field(converter=tuple)
    slice_bound: SliceBound | None = None
    paired: PairedSum | None = None
    pieces: tuple[Piece, ...] = attrs.field(default=(), converter=tuple)
    """Where the kernel runs several products of the same row operand side by side: each of them,
    in the order of the columns (``extents[n]`` counts them all; ``operands`` are the first's and
    ``epilogue`` holds every piece's stores)."""

    @property
    def reduce_extent(self) -> int:
        return self.extents[self.reduce_var]

    @property
    def symbolic(self) -> bool:
        return sizes.is_symbolic(tuple(self.extents.values()))

    def buffer_bytes(self, name: str) -> int:
        """The bytes of buffer ``name``, at the hints of its sizes known only at run time: for costs."""
        found = self.kernel.buffer(name).type
        return sizes.hint(sizes.numel(found.shape)) * found.dtype.itemsize

    def hinted(self) -> Contraction:
        """The contraction with each extent known only at run time at its hint (the example call's
        value): what the cost model weighs. The Tile IR and the kernel keep the symbols."""
        if not self.symbolic:
            return self
        return attrs.evolve(self, extents={v: sizes.hint(e) for v, e in self.extents.items()})

    def operand(self, text: str) -> Operand:
        for o in self.operands:
            if o.text == text:
                return o
        raise KeyError(text)

    def invariant_loads(self) -> tuple[loop_ir.Load, ...]:
        """Loads of the accumulated value that do not move with the reduction variable."""
        return _invariant_loads(self.value, self.reduce_var)


@functools.lru_cache(maxsize=1024)
def _invariant_loads(value: Expr, reduce_var: str) -> tuple[loop_ir.Load, ...]:
    """``Contraction.invariant_loads``, kept per value: the cost model asks for every setting it weighs."""
    return tuple(load for load in outer_loads(value) if reduce_var not in _index_vars(load))


def outer_loads(expr: Expr) -> list[loop_ir.Load]:
    """The distinct loads of ``expr`` that are not inside the index of another load, in order."""
    found: list[loop_ir.Load] = []
    if isinstance(expr, loop_ir.Load):
        return [expr]
    for child in expr.children():
        found += [load for load in outer_loads(child) if load not in found]
    return found


def _index_vars(load: loop_ir.Load) -> set[str]:
    return set().union(*(ex.free_vars(i) for i in load.index)) if load.index else set()


def _reads_buffers(load: loop_ir.Load) -> bool:
    return any(isinstance(n, loop_ir.Load) for i in load.index for n in ex.walk(i))


def _is_sum_identity(value: Expr) -> bool:
    return isinstance(value, ex.Const) and value.dtype != dtypes.bool_ and value.value == 0


def analyse(kernel: loop_ir.Kernel, joined: bool = False) -> Contraction:
    """The contraction in ``kernel``, or ``NotAContraction`` saying which part does not fit; a
    kernel that sums two products at once (``Contraction.paired``) or runs several side by side
    (``Contraction.pieces``) only where ``joined``."""
    found = _analysed(kernel)
    if isinstance(found, NotAContraction):
        raise NotAContraction(str(found))
    if found.paired is not None and not joined:
        raise NotAContraction(f"loop kernel {kernel.name} sums two products at once ({found.acc} and "
                              f"{found.paired.acc}); only the 16-bit Hopper GEMM runs it")
    if found.pieces and not joined:
        raise NotAContraction(f"loop kernel {kernel.name} runs {len(found.pieces)} products of one input side by "
                              "side; only the 16-bit Hopper GEMM runs it")
    return found


@functools.lru_cache(maxsize=4096)
def _analysed(kernel: loop_ir.Kernel) -> Contraction | NotAContraction:
    """``analyse``'s answer, kept: fusion rules ask again of every unchanged kernel after each change
    to the program (thousands of times over a model's compile)."""
    try:
        return _analyse(kernel)
    except NotAContraction as reason:
        return reason


def _analyse(kernel: loop_ir.Kernel) -> Contraction:
    where = f"loop kernel {kernel.name}"
    if len(kernel.body) > 1 and all(isinstance(s, loop_ir.Loop) and s.kind == "parallel" for s in kernel.body):
        return _side_by_side(kernel, where)
    loops, inner = split_parallel_nest(kernel.body)
    if len(loops) < 2:
        raise NotAContraction(f"{where} has {len(loops)} parallel loop(s) around its body; a contraction needs two or more")
    if len(inner) < 3:
        raise NotAContraction(f"{where}: the innermost parallel loop must hold an Init, one reduce loop and the stores")
    inits = list(itertools.takewhile(lambda s: isinstance(s, loop_ir.Init), inner))[:2]
    if len(inner) < len(inits) + 2:
        raise NotAContraction(f"{where}: the innermost parallel loop must hold an Init, one reduce loop and the stores")
    reduce_loop, *stores = inner[len(inits):] if inits else inner[1:]
    if not inits or not all(_is_sum_identity(i.value) and i.value.dtype == inits[0].value.dtype for i in inits):
        raise NotAContraction(f"{where}: the body must start by setting an accumulator to 0")
    init = inits[0]
    if not (isinstance(reduce_loop, loop_ir.Loop) and reduce_loop.kind == "reduce"
            and len(reduce_loop.body) == len(inits)):
        raise NotAContraction(f"{where}: after the Init there must be one reduce loop holding one Accumulate")
    accumulates = reduce_loop.body
    if not all(isinstance(a, loop_ir.Accumulate) and a.acc == i.acc and a.op == "sum"
               for a, i in zip(accumulates, inits)):
        raise NotAContraction(f"{where}: the reduce loop must sum into the accumulator {init.acc}")
    accumulate = accumulates[0]
    if not all(isinstance(s, loop_ir.Store) for s in stores):
        raise NotAContraction(f"{where}: only stores may follow the reduce loop")

    parallel = [loop.var for loop in loops]
    sums = {i.acc for i in inits}
    for store in stores:
        foreign = set().union(*(ex.free_vars(e) for e in loop_ir.expressions(store))) - set(parallel) - sums
        if foreign:
            raise NotAContraction(
                f"{where}: the store to {store.buffer} reads {', '.join(sorted(foreign))}, "
                "which the contraction does not compute"
            )
    if len(accumulates) == 2:
        c = _parts(kernel, loops, init, reduce_loop, stores, accumulate.value, None)
        return attrs.evolve(c, paired=_paired_sum(c, accumulates[1], where))
    value, bound = read_guard(accumulate.value, reduce_loop.var)
    if bound is not None:
        c = _parts(kernel, loops, init, reduce_loop, stores, value, bound)
        if ex.free_vars(bound.start) <= set(c.batch):
            return c
    return _parts(kernel, loops, init, reduce_loop, stores, accumulate.value, None)


def _side_by_side(kernel: loop_ir.Kernel, where: str) -> Contraction:
    """The contraction of a kernel whose nests are products of the same row operand over the same
    rows, batch and reduction, each its own columns (``Contraction.pieces``): their columns side by
    side, in the nests' order."""
    parts = [_analyse(attrs.evolve(kernel, body=(nest,))) for nest in kernel.body]
    first = parts[0]
    same = ("m", "n", "batch", "reduce_var", "acc", "acc_dtype", "init")
    rows = {v: e for v, e in first.extents.items() if v != first.n}
    for part in parts[1:]:
        if any(getattr(part, name) != getattr(first, name) for name in same) \
                or {v: e for v, e in part.extents.items() if v != part.n} != rows:
            raise NotAContraction(f"{where}: its nests are not products over the same rows, batch and reduction, "
                                  "with the same names")
    for part in parts:
        if part.paired is not None or part.slice_bound is not None or len(part.operands) != 2 \
                or [o.side for o in part.operands].count("n") != 1:
            raise NotAContraction(f"{where}: each of its nests must be a plain product of a row operand by a column "
                                  "operand")
        if next(o for o in part.operands if o.side == "m") != next(o for o in first.operands if o.side == "m"):
            raise NotAContraction(f"{where}: its nests' products do not share their row operand")
        if not isinstance(part.extents[part.n], int):
            raise NotAContraction(f"{where}: its nests' columns must be known when compiling")
    written = {s.buffer for part in parts for s in part.epilogue}
    if any(isinstance(node, loop_ir.Load) and node.buffer in written
           for part in parts for s in part.epilogue for node in ex.walk(s.value)):
        raise NotAContraction(f"{where}: a nest's epilogue reads what another's stores")
    pieces, column = [], 0
    for part in parts:
        pieces.append(Piece(column, part))
        column += part.extents[part.n]
    return attrs.evolve(first, kernel=kernel, extents={**first.extents, first.n: column},
                        epilogue=tuple(s for part in parts for s in part.epilogue), pieces=tuple(pieces))


def _paired_sum(c: Contraction, second: loop_ir.Accumulate, where: str) -> PairedSum:
    """The second of two sums in one kernel, where it is the first's term with another column
    operand read at the same place (a gate's and its up projection's weights) or a fixed number of
    rows away (the two halves of one weight)."""
    columns = [o for o in c.operands if o.side == "n"]
    moving = [load for load in outer_loads(second.value) if c.reduce_var in _index_vars(load)]
    others = [load for load in moving if load not in {o.load for o in c.operands}]
    if any(c.extents[v] != 1 for v in c.batch) or len(columns) != 1 or len(others) != 1:
        raise NotAContraction(f"{where}: two sums in one kernel must be products of the same row operand by two "
                              "column operands, with no batch")
    (column,), (other,) = columns, others
    apart = [index.affine(a).plus(index.affine(b), -1) for a, b in zip(other.index, column.load.index)]
    if (len(other.index) != len(column.load.index) or not all(d.is_constant() for d in apart)
            or other.dtype != column.load.dtype
            or ex.transform(c.value, lambda e: other if e == column.load else None) != second.value):
        raise NotAContraction(f"{where}: its second sum is not its first with another column operand read at the "
                              "same place or a fixed number of rows away")
    return PairedSum(second.acc, second.value, Operand(other, "n"))


def _parts(kernel: loop_ir.Kernel, loops, init: loop_ir.Init, reduce_loop: loop_ir.Loop,
           stores: list[loop_ir.Store], value: Expr, bound: SliceBound | None) -> Contraction:
    """The contraction whose summed term is ``value``, once ``analyse`` has checked the nest."""
    where = f"loop kernel {kernel.name}"
    r = reduce_loop.var
    extents = {loop.var: loop.extent for loop in loops} | {r: reduce_loop.extent}
    parallel = [loop.var for loop in loops]
    moving = [load for load in outer_loads(value) if r in _index_vars(load)]
    for load in moving:
        if _reads_buffers(load):
            raise NotAContraction(f"{where}: {loop_ir.format_value(load)} reads another buffer in its index (a gather)")

    strides = _store_strides(stores[0], kernel, parallel)
    n = _column_var(stores[0], strides, where)
    if not any(n in _index_vars(load) for load in moving):
        raise NotAContraction(f"{where}: no operand moves with {n}, the contiguous axis of {stores[0].buffer}")
    with_n = set().union(*(_index_vars(load) for load in moving if n in _index_vars(load)))
    rows = [v for v in parallel if v != n and v not in with_n and any(v in _index_vars(load) for load in moving)]
    if not rows:
        raise NotAContraction(
            f"{where}: no operand moves with an output row variable without also moving with the column variable {n}"
        )
    m = min(rows, key=lambda v: strides[v])
    batch = tuple(v for v in parallel if v not in (m, n))

    operands = []
    for load in moving:
        used = _index_vars(load)
        operands.append(Operand(load, "m" if m in used else "n" if n in used else "k"))
    return Contraction(
        kernel=kernel,
        extents=extents,
        m=m,
        n=n,
        batch=batch,
        reduce_var=r,
        acc=init.acc,
        acc_dtype=init.value.dtype,
        init=init.value,
        value=value,
        epilogue=tuple(stores),
        operands=tuple(operands),
        slice_bound=bound,
    )


def _store_strides(store: loop_ir.Store, kernel: loop_ir.Kernel, variables: list[str]) -> dict[str, float]:
    """How far apart in the output two neighbouring values of each variable are written (inf if unknown).
    A variable split into digits (``column // 64``, ``column % 64``: a projection's columns stored as
    heads and features) moves as its remainder does, but at the end of each run of the divisor."""
    offset = index.linearize(store.index, kernel.buffer(store.buffer).type.shape)
    steps = {v: index.coefficient(offset, v) or _remainder_step(offset, v) for v in variables}
    return {v: abs(step) if step else float("inf") for v, step in steps.items()}


def _remainder_step(offset: Expr, var: str) -> int | None:
    """The coefficient of ``var % d`` in ``offset`` where ``var`` appears only there and in ``var // d``."""
    found = None
    for atom, coef in index.affine(offset).terms.items():
        if isinstance(atom, ex.Op) and atom.op in ("mod", "floordiv") and isinstance(atom.args[0], ex.Var) \
                and atom.args[0].name == var and isinstance(atom.args[1], ex.Const):
            if atom.op == "mod":
                found = coef
        elif var in ex.free_vars(atom):
            return None
    return found


def _column_var(store: loop_ir.Store, strides: dict[str, float], where: str) -> str:
    """The parallel variable along which the output is contiguous."""
    best = min(strides, key=lambda v: strides[v])
    if strides[best] == float("inf"):
        raise NotAContraction(f"{where}: the store to {store.buffer} does not move with any parallel variable")
    return best


def contractions(program: loop_ir.Program) -> Iterator[tuple[int, Contraction]]:
    """Each kernel of ``program`` that is a contraction, by its position, as ``analyse`` finds it."""
    for position, kernel in enumerate(program.kernels):
        try:
            yield position, analyse(kernel)
        except NotAContraction:
            continue

"""What the fusion rules need to know about kernels: their shape, who reads what."""

from __future__ import annotations

import functools
from typing import Any, Callable, Protocol

import attrs

from lamina.core.ir import expr as ex, index, loop_ir, sizes
from lamina.core.ir.expr import Expr

Ranges = dict[str, int]

MAX_EXPRESSION_NODES = 4096
"""Fusion copies a value once per use: ``y = x * x`` inlined into ``z = y * y`` doubles
it. Past this many expression nodes in one kernel, rules leave kernels apart rather
than let a chain of such uses grow the code exponentially."""


@attrs.frozen
class Pointwise:
    """A kernel that stores one value per point of its parallel loops, at exactly those loops' variables."""

    loops: tuple[loop_ir.Loop, ...]
    store: loop_ir.Store

    @property
    def vars(self) -> tuple[str, ...]:
        return tuple(loop.var for loop in self.loops)


def parallel_nest(kernel: loop_ir.Kernel) -> tuple[tuple[loop_ir.Loop, ...], tuple[loop_ir.Stmt, ...]]:
    """The perfect nest of parallel loops around the kernel's statements, and those statements."""
    loops = []
    body = kernel.body
    while len(body) == 1 and isinstance(body[0], loop_ir.Loop) and body[0].kind == "parallel":
        loops.append(body[0])
        body = body[0].body
    return tuple(loops), tuple(body)


def pointwise(kernel: loop_ir.Kernel) -> Pointwise | None:
    """The kernel as a Pointwise, or None when it reduces, declares, or stores anywhere else."""
    loops, body = parallel_nest(kernel)
    if len(body) != 1 or not isinstance(body[0], loop_ir.Store) or len(kernel.outputs) != 1:
        return None
    store = body[0]
    identity = tuple(ex.Var(loop.var) for loop in loops)
    shape = kernel.outputs[0].type.shape
    if store.buffer != kernel.outputs[0].name or store.index != identity:
        return None
    if tuple(loop.extent for loop in loops) != shape:
        return None
    return Pointwise(loops, store)


def single_store(kernel: loop_ir.Kernel) -> loop_ir.Store | None:
    """The kernel's one store when it writes every element of its one output once,
    one element per point of its parallel loops (size-1 axes may be stored at 0)."""
    loops, body = parallel_nest(kernel)
    stores = [s for s in loop_ir.statements(kernel.body) if isinstance(s, loop_ir.Store)]
    if len(kernel.outputs) != 1 or len(stores) != 1 or stores[0] not in body:
        return None
    store = stores[0]
    extents = {loop.var: loop.extent for loop in loops}
    shape = kernel.outputs[0].type.shape
    used = []
    for coordinate, size in zip(store.index, shape):
        if isinstance(coordinate, ex.Var) and extents.get(coordinate.name) == size:
            used.append(coordinate.name)
        elif not (isinstance(coordinate, ex.Const) and coordinate.value == 0 and size == 1):
            return None
    return store if sorted(used) == sorted(extents) and len(set(used)) == len(used) else None


def bound_names(body: tuple[loop_ir.Stmt, ...]) -> set[str]:
    names = set()
    for s in loop_ir.statements(body):
        if isinstance(s, loop_ir.Loop):
            names.add(s.var)
        elif isinstance(s, (loop_ir.Init, loop_ir.Accumulate)):
            names.add(s.acc)
    return names


def buffers(program: loop_ir.Program) -> dict[str, loop_ir.Buffer]:
    found = {b.name: b for b in program.inputs + program.temporaries + program.outputs}
    for k in program.kernels:
        for b in k.inputs + k.outputs:
            found.setdefault(b.name, b)
    return found


@functools.lru_cache(maxsize=8192)
def kernel_loads(kernel: loop_ir.Kernel) -> tuple[loop_ir.Load, ...]:
    """Every load of the kernel, in order. Kept per kernel: the fusion rules ask for every later
    kernel's reads after each change to a model of hundreds of kernels."""
    return tuple(loop_ir.loads(kernel.body))


@functools.lru_cache(maxsize=8192)
def loaded_buffers(kernel: loop_ir.Kernel) -> tuple[str, ...]:
    """Names of the buffers the kernel reads, in order of first load."""
    return tuple(dict.fromkeys(load.buffer for load in kernel_loads(kernel)))


def writers_and_readers(kernels: list[loop_ir.Kernel]) -> tuple[dict[str, int], dict[str, list[int]]]:
    """Which kernel (by position) writes each buffer, and which kernels read it, in order."""
    writers = {b.name: i for i, k in enumerate(kernels) for b in k.outputs}
    readers: dict[str, list[int]] = {}
    for i, k in enumerate(kernels):
        for name in loaded_buffers(k):
            readers.setdefault(name, []).append(i)
    return writers, readers


class Untouched:
    """The buffers that the changes a rule has made in one call read and wrote. A rule that would
    make one change per call (the driver starting over from the first rule after each) makes, in
    the same call, every further change whose kernels write nothing that those changes read or
    wrote, and read nothing that they wrote: the rules before it declined those kernels already,
    and nothing they read or write has moved since, so the driver would have come back for each,
    one call at a time (a decoder's next layer). What every layer only reads may be shared: the
    weights, and temporaries that no change writes (a rotation's tables, an attention mask)."""

    def __init__(self):
        self.read: set[str] = set()
        self.written: set[str] = set()

    def holds(self, *kernels: loop_ir.Kernel | None) -> bool:
        """Whether none of ``kernels`` (None: one already replaced) touches what earlier changes did."""
        return all(k is not None and not ({b.name for b in k.outputs} & (self.written | self.read))
                   and not ({b.name for b in k.inputs} & self.written) for k in kernels)

    def touch(self, *kernels: loop_ir.Kernel) -> None:
        for k in kernels:
            self.read |= {b.name for b in k.inputs}
            self.written |= {b.name for b in k.outputs}

    def __bool__(self) -> bool:
        return bool(self.written or self.read)


def may_run_at(program: loop_ir.Program, joined: loop_ir.Kernel, position: int, later: int) -> bool:
    """Whether the kernel at ``later`` may run in ``joined``, which takes the place of the kernel at
    ``position`` (kernels run together in one launch): no kernel between writes what it reads or
    touches what it writes, and it reads nothing ``joined`` writes."""
    kernel = program.kernels[later]
    reads = set(loaded_buffers(kernel))
    writes = {b.name for b in kernel.outputs}
    if reads & {b.name for b in joined.outputs}:
        return False
    for between in program.kernels[position + 1:later]:
        written = {b.name for b in between.outputs}
        if written & (reads | writes) or writes & set(loaded_buffers(between)):
            return False
    return True


class Joining(Protocol):
    """What a rule that joins kernels in one launch knows of a group so far: its kernel, and whatever
    the rule weighs it by (``joined_in_order``)."""

    kernel: loop_ir.Kernel


def joined_in_order(program: loop_ir.Program, keys: list, start: Callable[[loop_ir.Kernel], Joining],
                    extend: Callable[[Joining, loop_ir.Kernel], Joining | None],
                    keep: Callable[[Joining], bool]) -> loop_ir.Program | None:
    """``program`` with kernels of one key (``keys[i]`` for kernel ``i``; None for none) joined in one
    launch, from the first of each key on: each later kernel of its key that may run at its place
    (``may_run_at``) joins where ``extend`` gives the group with it (None: it stays apart), and the
    group replaces its kernels where it holds more than one and ``keep`` takes it. None where
    nothing joined."""
    kernels: list[loop_ir.Kernel | None] = list(program.kernels)
    untouched = Untouched()
    changed = False
    positions: dict[Any, list[int]] = {}  # of each key's kernels, in order
    for position, key in enumerate(keys):
        if key is not None:
            positions.setdefault(key, []).append(position)
    for position, kernel in enumerate(program.kernels):
        key = keys[position]
        if key is None or kernels[position] is not kernel or not untouched.holds(kernel):
            continue
        partners = [later for later in positions[key] if later > position]
        if not partners:
            continue
        group, taken = start(kernel), [position]
        for later in partners:
            other = kernels[later]
            if other is None or not untouched.holds(other) or not may_run_at(program, group.kernel, position, later):
                continue
            grown = extend(group, other)
            if grown is not None:
                group = grown
                taken.append(later)
        if len(taken) > 1 and keep(group):
            untouched.touch(*(program.kernels[i] for i in taken))
            kernels[position] = group.kernel
            for i in taken[1:]:
                kernels[i] = None
            changed = True
    if not changed:
        return None
    return with_kernels(program, kernels)


def with_exact_inputs(kernel: loop_ir.Kernel, known: dict[str, loop_ir.Buffer]) -> loop_ir.Kernel:
    """The kernel with its inputs set to exactly the buffers it loads, in order of first load."""
    inputs = tuple(known[name] for name in loaded_buffers(kernel))
    return kernel if inputs == kernel.inputs else attrs.evolve(kernel, inputs=inputs)


def map_with_ranges(
    body: tuple[loop_ir.Stmt, ...], fn: Callable[[Expr, Ranges], Expr], ranges: Ranges | None = None
) -> tuple[loop_ir.Stmt, ...]:
    """Rebuild ``body`` with ``fn(expr, ranges)`` applied to every expression; ``ranges``
    holds the extents of the loops around the expression."""
    ranges = dict(ranges or {})
    out = []
    for s in body:
        if isinstance(s, loop_ir.Loop):
            out.append(attrs.evolve(s, body=map_with_ranges(s.body, fn, {**ranges, s.var: s.extent})))
        elif isinstance(s, (loop_ir.Init, loop_ir.Accumulate)):
            out.append(attrs.evolve(s, value=fn(s.value, ranges)))
        else:
            out.append(attrs.evolve(s, index=tuple(fn(e, ranges) for e in s.index), value=fn(s.value, ranges)))
    return tuple(out)


def simplify_indices(expr: Expr, ranges: Ranges) -> Expr:
    """``expr`` with the index of every load simplified under ``ranges``."""

    def simplify(node: Expr) -> Expr | None:
        if isinstance(node, loop_ir.Load):
            simplified = tuple(index.simplify(i, ranges) for i in node.index)
            return attrs.evolve(node, index=simplified) if simplified != node.index else None
        return None

    return ex.transform(expr, simplify)


def with_kernels(program: loop_ir.Program, kernels: list[loop_ir.Kernel | None],
                 dropped: set[str] = frozenset()) -> loop_ir.Program:
    """The program with ``kernels`` (None where a rule fused one away) and without the temporaries
    ``dropped``."""
    program = attrs.evolve(program, kernels=tuple(k for k in kernels if k is not None))
    return without_buffers(program, dropped) if dropped else program


def without_buffers(program: loop_ir.Program, names: set[str]) -> loop_ir.Program:
    """The program with temporaries ``names`` no longer listed."""
    kept = tuple(b for b in program.temporaries if b.name not in names)
    return attrs.evolve(program, temporaries=kept)


@functools.lru_cache(maxsize=8192)
def nodes(kernel: loop_ir.Kernel) -> int:
    """How many expression nodes the kernel's statements hold (kept per kernel, as its reads are)."""
    return sum(sum(1 for _ in ex.walk(e)) for s in loop_ir.statements(kernel.body) for e in loop_ir.expressions(s))


def copies_fit(host: loop_ir.Kernel, buffer: str, value: Expr, extra: int = 0) -> bool:
    """Whether ``host`` stays within ``MAX_EXPRESSION_NODES`` once every load of ``buffer``
    in it is replaced by a copy of ``value`` (and ``extra`` nodes are added)."""
    uses = sum(1 for load in kernel_loads(host) if load.buffer == buffer)
    return nodes(host) + extra + uses * sum(1 for _ in ex.walk(value)) <= MAX_EXPRESSION_NODES


def gathers(value: Expr) -> bool:
    """Whether ``value`` reads a buffer at an index that itself reads a buffer."""
    return any(
        isinstance(node, loop_ir.Load) and any(isinstance(n, loop_ir.Load) for i in node.index for n in ex.walk(i))
        for node in ex.walk(value)
    )


def shared_in_reduction(kernel: loop_ir.Kernel, buffer: str) -> bool:
    """Whether a reduce loop of ``kernel`` reads ``buffer`` at an index that misses one of
    the kernel's parallel variables, or the reduce loop's own: each element then serves
    several points, as a matmul's operand does (or several terms of the reduction, as
    attention's queries serve every key)."""
    loops, _ = parallel_nest(kernel)
    parallel = {loop.var for loop in loops}
    for s in loop_ir.statements(kernel.body):
        if isinstance(s, loop_ir.Loop) and s.kind == "reduce":
            for load in loop_ir.loads(s.body):
                used = set().union(*(ex.free_vars(i) for i in load.index)) if load.index else set()
                if load.buffer == buffer and not (parallel | {s.var}) <= used:
                    return True
    return False


EXPENSIVE_OPS = frozenset({"exp", "log", "tanh", "sigmoid", "sin", "cos", "erf"})
"""Scalar ops that cost tens of instructions (a division by a variable too): worth computing once."""
RECOMPUTE_LIMIT = 32
"""Inlined into a reader that broadcasts it, a value is recomputed for every point of the
axes its index misses (a matmul operand: every output column); past this many, an expensive
value is cheaper to store once and read back. Attention's probabilities before the product with
the values are read once per column of a head (64 to 256): recomputed, their exponentials took
most of a T5 layer's time on the H200 (T5 reaches lamina as PyTorch's attention math)."""


def expensive(value: Expr) -> bool:
    for node in ex.walk(value):
        if isinstance(node, ex.Op) and (node.op in EXPENSIVE_OPS or (node.op == "div" and not isinstance(node.args[1], ex.Const))):
            return True
    return False


def reads_at_several_points(value: Expr) -> bool:
    """Whether ``value`` loads one buffer at two different indices (RoPE's rotated half):
    as a matmul's operand, each of those loads is a tile of its own to stage."""
    indices: dict[str, set] = {}
    for node in ex.walk(value):
        if isinstance(node, loop_ir.Load):
            indices.setdefault(node.buffer, set()).add(node.index)
    return any(len(found) > 1 for found in indices.values())


def replication(kernel: loop_ir.Kernel, buffer: str) -> int:
    """How many points of ``kernel``'s parallel loops read each element of ``buffer``: the
    product of the parallel extents that a load's index misses (1 when it misses none), sizes
    known only at run time taken at their hints (a cost, not a fact)."""
    loops, _ = parallel_nest(kernel)
    most = 1
    for load in kernel_loads(kernel):
        if load.buffer == buffer:
            used = set().union(*(ex.free_vars(i) for i in load.index)) if load.index else set()
            most = max(most, sizes.hint(sizes.numel([loop.extent for loop in loops if loop.var not in used])))
    return most


def reads_per_element(kernel: loop_ir.Kernel, buffer: str) -> int:
    """How many times ``kernel`` reads each element of ``buffer`` at most: ``replication``'s
    parallel points, times the iterations of each reduce loop around the load that its index
    misses (attention's queries, read once per key by the loops over the keys)."""
    loops, _ = parallel_nest(kernel)
    most = 1

    def visit(body: tuple[loop_ir.Stmt, ...], around: tuple[loop_ir.Loop, ...]) -> None:
        nonlocal most
        for s in body:
            if isinstance(s, loop_ir.Loop):
                visit(s.body, around + ((s,) if s.kind == "reduce" else ()))
                continue
            for load in (n for e in loop_ir.expressions(s) for n in ex.walk(e) if isinstance(n, loop_ir.Load)):
                if load.buffer != buffer:
                    continue
                used = set().union(*(ex.free_vars(i) for i in load.index)) if load.index else set()
                missed = [loop for loop in loops + around if loop.var not in used]
                most = max(most, sizes.hint(sizes.numel([loop.extent for loop in missed])))

    visit(kernel.body, ())
    return most


def inline_producer(consumer: loop_ir.Kernel, producer: Pointwise) -> loop_ir.Kernel:
    """``consumer`` with every load of the producer's buffer replaced by the producer's value there."""
    buffer = producer.store.buffer
    value = producer.store.value

    def replace(node: Expr) -> Expr | None:
        if isinstance(node, loop_ir.Load) and node.buffer == buffer:
            at = dict(zip(producer.vars, node.index))
            return ex.cast(ex.substitute(value, at), node.dtype)
        return None

    def rewrite(e: Expr, ranges: Ranges) -> Expr:
        return simplify_indices(ex.transform(e, replace), ranges)

    return attrs.evolve(consumer, body=map_with_ranges(consumer.body, rewrite))


def renamed(body: tuple[loop_ir.Stmt, ...], names: dict[str, str]) -> tuple[loop_ir.Stmt, ...]:
    """``body`` with loop variables and accumulators renamed by ``names`` (old -> new, all at once)."""

    def rename(node: Expr) -> Expr | None:
        if isinstance(node, ex.Var) and node.name in names:
            return attrs.evolve(node, name=names[node.name])
        return None

    out = []
    for s in body:
        if isinstance(s, loop_ir.Loop):
            out.append(attrs.evolve(s, var=names.get(s.var, s.var), body=renamed(s.body, names)))
        else:
            (s,) = loop_ir.map_expressions((s,), lambda e: ex.transform(e, rename))
            if isinstance(s, (loop_ir.Init, loop_ir.Accumulate)):
                s = attrs.evolve(s, acc=names.get(s.acc, s.acc))
            out.append(s)
    return tuple(out)


def fresh_names(names: set[str], taken: set[str]) -> dict[str, str]:
    """A new name for each of ``names`` that clashes with ``taken``; the others keep theirs."""
    used = set(taken) | set(names)
    found = {}
    for name in sorted(names & set(taken)):
        k = 1
        while f"{name}_{k}" in used:
            k += 1
        found[name] = f"{name}_{k}"
        used.add(found[name])
    return found


def renumbered(kernel: loop_ir.Kernel) -> loop_ir.Kernel:
    """The kernel with its accumulators named ``acc0, acc1, ...`` and its reduce loops
    ``r0, r1, ...`` in the order they appear, so that fused kernels print like lowered ones."""
    accs, reduce_vars = [], []
    for s in loop_ir.statements(kernel.body):
        if isinstance(s, loop_ir.Init) and s.acc not in accs:
            accs.append(s.acc)
        elif isinstance(s, loop_ir.Loop) and s.kind == "reduce" and s.var not in reduce_vars:
            reduce_vars.append(s.var)
    kept = bound_names(kernel.body) - set(accs) - set(reduce_vars)
    kept |= {b.name for b in kernel.inputs + kernel.outputs}
    names: dict[str, str] = {}
    following = {"acc": 0, "r": 0}
    for old, prefix in [(a, "acc") for a in accs] + [(r, "r") for r in reduce_vars]:
        while f"{prefix}{following[prefix]}" in kept:
            following[prefix] += 1
        names[old] = f"{prefix}{following[prefix]}"
        following[prefix] += 1
    return attrs.evolve(kernel, body=renamed(kernel.body, names))


def worth_storing(producer: Pointwise, reader_count: int, temporaries: dict[str, loop_ir.Buffer]) -> bool:
    """Whether a pointwise value read by several kernels should be written once rather
    than recomputed in each reader: when it combines two or more temporaries of its own
    size.

    Recomputing such a value keeps every one of them alive until its last reader, and
    redoes its arithmetic there: the residual stream of a transformer, ``h = x + attn``,
    read by a norm and by the next residual add, would otherwise pull every earlier
    layer's outputs along to the end of the model. Views, values made from inputs and
    constants, and values that combine one tensor with row statistics (a softmax's
    ``exp(x - max)``) stay cheap to recompute.
    """
    if reader_count < 2:
        return False
    size = sizes.hint(sizes.numel(producer_shape(producer)))
    read = {load.buffer for load in loop_ir.loads((producer.store,))}
    full_size = [name for name in read
                 if name in temporaries and sizes.hint(sizes.numel(temporaries[name].type.shape)) >= size]
    return len(full_size) > 1


def producer_shape(producer: Pointwise) -> tuple[int, ...]:
    return tuple(loop.extent for loop in producer.loops)

"""Inputs a program updates, written in place: a key-value cache is not copied at every step.

A decoding step of a language model writes its new keys and values into the cache it was
given (``torch_ir.Graph.updates``). Computed as an output, the new cache is a second copy of
the whole cache, written by one kernel and copied into the input by the caller. Where it can,
this stage has that kernel write the input itself:

- the kernel computes the new value element by element (its store is ``new[i, j, ...]`` in a
  nest of parallel loops) and reads the input only at the element it writes, so no element is
  read after it was overwritten;
- no later kernel reads the input (every later reader of the new value reads the input then).
  A kernel whose new value nothing in the program reads (a counter that each step moves on)
  is moved after the last kernel that reads the old value, where nothing in between stops it.

The input is then also an output of the program, which the caller finds already written.
Where the new value is the input with one position changed (``where(i2 == position, new,
cache)``, a decoding step's ``index_copy_``), the kernel stores that position alone: the loop
over the axis is dropped and the store lands at the position, clamped into the axis, with the
element's own value where the position is outside it (eager PyTorch would have raised there;
the cache is then left as it was).

Inputs written in place by adjacent kernels over the same loops, neither reading what the other
writes (a layer's new keys and its new values, each stored at the position alone), are then
written by one kernel, its loops around both stores. Counters written in place (kernels of
single values, no loops) that nothing after them reads or writes are written at the end of the
program, all in one kernel. A decoding step's layers each write their keys, their values and a
counter of their own: a launch each otherwise.
"""

from __future__ import annotations

from typing import Sequence

import attrs

from lamina.core.ir import dtypes, expr as ex, loop_ir, torch_ir
from lamina.core.ir.loop_ir import Load, Loop, Store


def write_updates_in_place(program: loop_ir.Program, updates: Sequence[tuple[str, str]]) -> loop_ir.Program:
    """``program`` with each ``(input, output)`` of ``updates`` written into the input where that is safe."""
    for name, output in updates:
        program = _in_place(program, name, output) or program
    return _counters_at_the_end(_adjacent_writes_joined(program))


def updated_buffers(graph: torch_ir.Graph, program: loop_ir.Program) -> list[tuple[str, str]]:
    """``graph.updates`` in the names of ``program``, lowered from it: inputs and outputs keep their
    positions through the levels (an output repeated is copied, its first place is the value)."""
    names = [i.name for i in graph.inputs]
    if len(names) != len(program.inputs) or len(graph.outputs) != len(program.outputs):
        return []
    return [(program.inputs[names.index(name)].name, program.outputs[graph.outputs.index(output)].name)
            for name, output in graph.updates]


def _in_place(program: loop_ir.Program, name: str, output: str) -> loop_ir.Program | None:
    inputs = {b.name: b for b in program.inputs}
    written = [b for b in program.outputs if b.name == output]
    if name not in inputs or not written or output in inputs or written[0].type != inputs[name].type:
        return None
    writers = [k for k, kernel in enumerate(program.kernels) if any(b.name == output for b in kernel.outputs)]
    if len(writers) != 1:
        return None
    moved = _after_readers(program, writers[0], name)
    if moved is None:
        return None
    program, position = moved
    kernel = program.kernels[position]
    body = _written_elementwise(kernel.body, output, name)
    if body is None:
        return None
    updated = inputs[name]

    def read_updated(e: ex.Expr) -> ex.Expr:
        return ex.transform(e, lambda n: attrs.evolve(n, buffer=name) if isinstance(n, Load) and n.buffer == output
                            else None)

    later = [attrs.evolve(k, inputs=[updated if b.name == output else b for b in k.inputs],
                          body=loop_ir.map_expressions(k.body, read_updated))
             if any(b.name == output for b in k.inputs) else k
             for k in program.kernels[position + 1:]]
    writer = loop_ir.Kernel(kernel.name, [b for b in kernel.inputs if b.name != name],
                            [updated if b.name == output else b for b in kernel.outputs], body)
    return attrs.evolve(
        program,
        outputs=[updated if b.name == output else b for b in program.outputs],
        kernels=[*program.kernels[:position], writer, *later],
    )


def _after_readers(program: loop_ir.Program, position: int, name: str) -> tuple[loop_ir.Program, int] | None:
    """``program`` with the kernel at ``position`` moved after the last later kernel that reads
    ``name``, and where it now is; None where a kernel in between reads what it writes or writes
    what it reads."""
    kernels = list(program.kernels)
    readers = [k for k in range(position + 1, len(kernels)) if any(b.name == name for b in kernels[k].inputs)]
    if not readers:
        return program, position
    writes = {b.name for b in kernels[position].outputs}
    reads = {b.name for b in kernels[position].inputs}
    for between in kernels[position + 1:readers[-1] + 1]:
        if writes & {b.name for b in between.inputs + between.outputs} or reads & {b.name for b in between.outputs}:
            return None
    kernels.insert(readers[-1], kernels.pop(position))
    return attrs.evolve(program, kernels=kernels), readers[-1]


def _written_elementwise(body: tuple[loop_ir.Stmt, ...], output: str, name: str) -> tuple[loop_ir.Stmt, ...] | None:
    """``body`` storing into ``name`` instead of ``output``, or None where its one store of ``output``
    is not element by element with every read of ``name`` at the element written."""
    stores = [s for s in loop_ir.statements(body) if isinstance(s, Store) and s.buffer == output]
    if len(stores) != 1:
        return None
    store = stores[0]
    nest = _loops_around(body, store)
    if nest is None or any(loop.kind != "parallel" for loop in nest):
        return None
    if len(store.index) != len(nest) or any(not (isinstance(e, ex.Var) and e.name == loop.var)
                                           for e, loop in zip(store.index, nest)):
        return None
    reads = [load for load in loop_ir.loads(body) if load.buffer == name]
    in_store = [n for n in ex.walk(store.value) if isinstance(n, Load) and n.buffer == name]
    if len(reads) != len(in_store) or any(load.index != store.index for load in reads):
        return None
    alone = _one_position(store, nest, name) if all(len(loop.body) == 1 for loop in nest) else None
    return _replaced(body, store, alone or (attrs.evolve(store, buffer=name), None))


def _loops_around(body: tuple[loop_ir.Stmt, ...], target: Store) -> list[Loop] | None:
    """The loops enclosing ``target``, outermost first (None where it is not in ``body``)."""
    for s in body:
        if s is target:
            return []
        if isinstance(s, Loop):
            inner = _loops_around(s.body, target)
            if inner is not None:
                return [s, *inner]
    return None


def _one_position(store: Store, nest: list[Loop], name: str) -> tuple[Store, Loop] | None:
    """The store of ``where(v == position, new, old)`` at the position alone, and the loop ``v`` it
    no longer needs; None where the value is not of that form."""
    value = store.value
    if not (isinstance(value, ex.Op) and value.op == "where" and _is_read_of(value.args[2], name, store.index)):
        return None
    condition, new, _ = value.args
    if not (isinstance(condition, ex.Op) and condition.op == "eq"):
        return None
    loops = {loop.var: loop for loop in nest}
    for here, there in (condition.args, condition.args[::-1]):
        var = here.args[0] if isinstance(here, ex.Op) and here.op == "cast" else here
        if isinstance(var, ex.Var) and var.name in loops and not ex.free_vars(there):
            extent = loops[var.name].extent
            clamped = ex.cast(ex.op("min", ex.op("max", there, ex.const(0, there.dtype)),
                                    ex.const(extent - 1, there.dtype)), dtypes.index)
            inside = ex.op("and", ex.op("ge", there, ex.const(0, there.dtype)),
                           ex.op("lt", there, ex.const(extent, there.dtype)))
            at = {var.name: clamped}
            index = tuple(ex.substitute(e, at) for e in store.index)
            kept = Load(name, index, value.dtype)
            return Store(name, index, ex.op("where", inside, ex.substitute(new, at), kept)), loops[var.name]
    return None


def _is_read_of(e: ex.Expr, name: str, index: tuple[ex.Expr, ...]) -> bool:
    return isinstance(e, Load) and e.buffer == name and e.index == index


def _replaced(body: tuple[loop_ir.Stmt, ...], target: Store, replacement: tuple[Store, Loop | None]):
    """``body`` with ``target`` replaced, and the loop ``replacement`` names (if any) dropped."""
    store, dropped = replacement
    out: list[loop_ir.Stmt] = []
    for s in body:
        if s is target:
            out.append(store)
        elif s is dropped:
            out.extend(_replaced(s.body, target, replacement))
        elif isinstance(s, Loop):
            out.append(attrs.evolve(s, body=_replaced(s.body, target, replacement)))
        else:
            out.append(s)
    return tuple(out)


def _adjacent_writes_joined(program: loop_ir.Program) -> loop_ir.Program:
    """``program`` with each run of adjacent kernels that write inputs over the same loops, and read
    nothing another of them writes, joined in one kernel whose loops hold all their stores."""
    inputs = {b.name for b in program.inputs}
    kernels: list[loop_ir.Kernel] = []
    for kernel in program.kernels:
        joined = _joined_writes(kernels[-1], kernel, inputs) if kernels else None
        if joined is None:
            kernels.append(kernel)
        else:
            kernels[-1] = joined
    return program if len(kernels) == len(program.kernels) else attrs.evolve(program, kernels=kernels)


def _joined_writes(first: loop_ir.Kernel, second: loop_ir.Kernel, inputs: set[str]) -> loop_ir.Kernel | None:
    """One kernel of ``first`` and ``second``, each storing into inputs only in a nest of parallel
    loops of the same extents; None where they are not so, or one reads or writes what the other writes."""
    nests = [loop_ir.split_parallel_nest(kernel.body) for kernel in (first, second)]
    if any(not loops or not body or not all(isinstance(s, Store) and s.buffer in inputs for s in body)
           for loops, body in nests):
        return None
    if [loop.extent for loop in nests[0][0]] != [loop.extent for loop in nests[1][0]]:
        return None
    writes = [{b.name for b in kernel.outputs} for kernel in (first, second)]
    touches = [_buffers(kernel) for kernel in (first, second)]
    if writes[0] & touches[1] or writes[1] & touches[0]:
        return None
    (loops, stores), (other_loops, other_stores) = nests
    renamed = {loop.var: ex.Var(mine.var, dtypes.index) for loop, mine in zip(other_loops, loops)}
    body: tuple[loop_ir.Stmt, ...] = stores + tuple(
        Store(s.buffer, tuple(ex.substitute(e, renamed) for e in s.index), ex.substitute(s.value, renamed))
        for s in other_stores)
    for loop in reversed(loops):
        body = (attrs.evolve(loop, body=body),)
    return loop_ir.Kernel(first.name, list({b.name: b for b in first.inputs + second.inputs}.values()),
                          [*first.outputs, *second.outputs], body)


def _counters_at_the_end(program: loop_ir.Program) -> loop_ir.Program:
    """``program`` with its in-place counters that may run last joined in one kernel at its end."""
    inputs = {b.name for b in program.inputs}
    kernels = list(program.kernels)
    counters = [k for k, kernel in enumerate(kernels) if _is_counter(kernel, inputs)
                and _may_run_last(kernels, k)]
    if len(counters) < 2:
        return program
    joined = [kernels[k] for k in counters]
    touched = [{b.name for b in kernel.outputs} for kernel in joined]
    if any(a & b for i, a in enumerate(touched) for b in touched[i + 1:]):
        return program
    last = loop_ir.Kernel(
        joined[0].name,
        list({b.name: b for kernel in joined for b in kernel.inputs}.values()),
        [b for kernel in joined for b in kernel.outputs],
        tuple(s for kernel in joined for s in kernel.body))
    return attrs.evolve(program, kernels=[k for i, k in enumerate(kernels) if i not in counters] + [last])


def _is_counter(kernel: loop_ir.Kernel, inputs: set[str]) -> bool:
    """A kernel of single values written into inputs: stores only, outside any loop."""
    return all(isinstance(s, Store) and s.buffer in inputs for s in kernel.body) \
        and all(b.name in inputs for b in kernel.outputs)


def _may_run_last(kernels: list[loop_ir.Kernel], position: int) -> bool:
    """Whether no later kernel reads or writes what the kernel at ``position`` writes, or writes
    what it reads."""
    writes = {b.name for b in kernels[position].outputs}
    reads = _buffers(kernels[position])
    for later in kernels[position + 1:]:
        if writes & _buffers(later) or reads & {b.name for b in later.outputs}:
            return False
    return True


def _buffers(kernel: loop_ir.Kernel) -> set[str]:
    """What a kernel reads or writes: a verified kernel loads only its inputs and outputs."""
    return {b.name for b in kernel.inputs + kernel.outputs}

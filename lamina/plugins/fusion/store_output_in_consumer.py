"""Let the first reader of a pointwise value that must be stored compute and store it too.

That is a program output, or a value several kernels read that is worth storing once
(``analysis.worth_storing``).

``h = x + attn; out = rmsnorm(h)`` with ``h`` returned (the residual stream, read again
later): ``h`` cannot be inlined away, but the norm can recompute ``x + attn`` wherever
it reads ``h`` and store ``h`` once from a statement that visits each of its elements
exactly once: a store of the norm whose enclosing loops (parallel or serial, never
reduce) read ``h`` at a one-to-one index. The norm's kernel then has two outputs and
the add's kernel is gone. Later readers of ``h`` still read the buffer, written by then.

The consumer's innermost loop must run along the value's contiguous axis, as the norm's runs
along ``h``'s rows: a consumer that walks the value across it (a K-major copy of attention's
values, which a key-value cache also returns) would store it an element per row, where a
kernel of its own stores it row by row.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import attrs

from lamina.core.ir import expr as ex, loop_ir
from lamina.core.ir.expr import Expr
from lamina.core.target import Target
from lamina.plugins.fusion import analysis


class StoreOutputInConsumer:
    name = "store_output_in_consumer"
    priority = 40

    def apply(self, program: loop_ir.Program, target: Target, knobs: Mapping[str, Any]) -> loop_ir.Program | None:
        outputs = {b.name for b in program.outputs}
        temporaries = {b.name: b for b in program.temporaries}
        known = analysis.buffers(program)
        kernels = list(program.kernels)
        for position, kernel in enumerate(kernels):
            producer = analysis.pointwise(kernel)
            if producer is None:
                continue
            buffer = producer.store.buffer
            readers = [
                later for later in range(position + 1, len(kernels)) if buffer in analysis.loaded_buffers(kernels[later])
            ]
            if not readers:
                continue
            if buffer not in outputs and not analysis.worth_storing(producer, len(readers), temporaries):
                continue
            consumer = kernels[readers[0]]
            if not analysis.copies_fit(consumer, buffer, producer.store.value, extra=analysis.nodes(kernel)):
                continue
            placed = _with_store(consumer, producer, kernel.outputs[0])
            if placed is None:
                continue
            fused = analysis.inline_producer(placed, producer)
            kernels[readers[0]] = analysis.with_exact_inputs(fused, known)
            del kernels[position]
            return attrs.evolve(program, kernels=tuple(kernels))
        return None


def _with_store(
    consumer: loop_ir.Kernel, producer: analysis.Pointwise, output: loop_ir.Buffer
) -> loop_ir.Kernel | None:
    """The consumer storing the producer's value just before the first of its stores that
    reads the producer's buffer one-to-one over its enclosing loops, or None if none does."""
    buffer = output.name
    shape = output.type.shape
    placed = False

    def visit(body: tuple[loop_ir.Stmt, ...], loops: tuple[loop_ir.Loop, ...]) -> tuple[loop_ir.Stmt, ...]:
        nonlocal placed
        out: list[loop_ir.Stmt] = []
        for s in body:
            if isinstance(s, loop_ir.Loop):
                out.append(attrs.evolve(s, body=visit(s.body, loops + (s,))))
                continue
            if isinstance(s, loop_ir.Store) and not placed and all(loop.kind != "reduce" for loop in loops):
                at = _one_to_one(s.value, buffer, shape, loops)
                if at is not None:
                    value = ex.substitute(producer.store.value, dict(zip(producer.vars, at)))
                    out.append(loop_ir.Store(buffer, at, value))
                    placed = True
            out.append(s)
        return tuple(out)

    body = visit(consumer.body, ())
    if not placed:
        return None
    body = analysis.map_with_ranges(body, analysis.simplify_indices)
    return attrs.evolve(consumer, outputs=(output,) + consumer.outputs, body=body)


def _one_to_one(
    value: Expr, buffer: str, shape: tuple[int, ...], loops: tuple[loop_ir.Loop, ...]
) -> tuple[Expr, ...] | None:
    """An index at which ``value`` reads ``buffer`` that names each element exactly once
    as ``loops`` run, or None."""
    extents = {loop.var: loop.extent for loop in loops}
    for load in ex.walk(value):
        if not (isinstance(load, loop_ir.Load) and load.buffer == buffer):
            continue
        names = []
        for coordinate, size in zip(load.index, shape):
            if isinstance(coordinate, ex.Var) and extents.get(coordinate.name) == size:
                names.append(coordinate.name)
            elif not (isinstance(coordinate, ex.Const) and coordinate.value == 0 and size == 1):
                break
        else:
            covered = all(v in names for v, n in extents.items() if n != 1)
            if len(set(names)) == len(names) and covered and math.prod(extents.values()) == math.prod(shape) \
                    and _along_its_rows(load.index, shape, loops):
                return load.index
    return None


def _along_its_rows(at: tuple[Expr, ...], shape: tuple[int, ...], loops: tuple[loop_ir.Loop, ...]) -> bool:
    """Whether the innermost of ``loops`` that moves runs along the last axis of more than one
    element of the buffer that ``at`` indexes."""
    moving = [loop.var for loop in loops if loop.extent > 1]
    rows = [coordinate for coordinate, size in zip(at, shape) if size > 1]
    return not moving or not rows or rows[-1] == ex.Var(moving[-1])

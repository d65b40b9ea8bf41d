"""Store a temporary in the narrower dtype that every reader casts it to.

A bfloat16 matmul accumulates in float32; when each reader of its result starts by
casting it to bfloat16, writing the float32 accumulator wastes half the bytes written,
read and held. Casting before the store gives every reader exactly the value it
computed before (the cast of the same number), in fewer bytes. Program outputs keep the
dtype the program promised. (``store_widened_temporaries_narrow`` takes the other way
round: values that their writer widens.)
"""

from __future__ import annotations

import functools

from typing import Any, Mapping

import attrs

from lamina.core.ir import expr as ex, loop_ir
from lamina.core.ir.dtypes import DType
from lamina.core.target import Target


class StoreNarrowedTemporaries:
    name = "store_narrowed_temporaries"
    priority = 10

    def apply(self, program: loop_ir.Program, target: Target, knobs: Mapping[str, Any]) -> loop_ir.Program | None:
        """Narrow every temporary that qualifies, in one pass: a model has one per layer."""
        result = program
        readers: dict[str, list[int]] = {}
        for position, kernel in enumerate(program.kernels):
            for name in dict.fromkeys(b.name for b in kernel.inputs):
                readers.setdefault(name, []).append(position)
        users = None
        for buffer in program.temporaries:
            narrow = _common_narrowing_cast(result, buffer, readers.get(buffer.name, []))
            if narrow is not None:
                users = users or buffer_users(program)
                result = narrow_temporary(result, buffer, narrow, users=users[buffer.name])
        return None if result is program else result


def buffer_users(program: loop_ir.Program) -> dict[str, list[int]]:
    """The positions of the kernels that read or write each buffer: what narrowing one rewrites (a
    model has hundreds of temporaries and thousands of kernels)."""
    users: dict[str, list[int]] = {}
    for position, kernel in enumerate(program.kernels):
        for name in dict.fromkeys(b.name for b in kernel.inputs + kernel.outputs):
            users.setdefault(name, []).append(position)
    return users


@functools.lru_cache(maxsize=8192)
def _casts_of(kernel: loop_ir.Kernel, name: str) -> tuple[frozenset[DType], bool]:
    """The dtypes that loads of ``name`` are cast to in ``kernel``, and whether any load is used uncast
    (kept per kernel: the rule asks again after every change, of kernels that are the same objects)."""
    targets: set[DType] = set()
    bare = False
    for s in loop_ir.statements(kernel.body):
        for e in loop_ir.expressions(s):
            cast_loads = set()
            for node in ex.walk(e):
                if isinstance(node, ex.Op) and node.op == "cast":
                    (arg,) = node.args
                    if isinstance(arg, loop_ir.Load) and arg.buffer == name:
                        targets.add(node.dtype)
                        cast_loads.add(id(arg))
            for node in ex.walk(e):
                if isinstance(node, loop_ir.Load) and node.buffer == name and id(node) not in cast_loads:
                    bare = True
    return frozenset(targets), bare


def _common_narrowing_cast(program: loop_ir.Program, buffer: loop_ir.Buffer, readers: list[int]) -> DType | None:
    """The one narrower dtype that every reader (by position) casts ``buffer`` to, if any."""
    targets: set[DType] = set()
    for position in readers:
        found, bare = _casts_of(program.kernels[position], buffer.name)
        if bare:
            return None
        targets |= found
    if len(targets) != 1:
        return None
    (narrow,) = targets
    return narrow if narrow.itemsize < buffer.type.dtype.itemsize else None


def narrow_temporary(program: loop_ir.Program, buffer: loop_ir.Buffer, dtype: DType,
                     widen_reads: bool = False, users: list[int] | None = None) -> loop_ir.Program:
    """``buffer`` stored as ``dtype``: its stores cast to it, and its readers' casts to it
    dropped, or (``widen_reads``) each of its loads cast back to the dtype it had. ``users``: the
    positions of the kernels that read or write it (``buffer_users``), where known."""
    name = buffer.name
    wide = buffer.type.dtype
    narrowed = attrs.evolve(buffer, type=attrs.evolve(buffer.type, dtype=dtype))

    def rewrite_expr(e: ex.Expr) -> ex.Expr:
        def uncast(node):
            if isinstance(node, ex.Op) and node.op == "cast" and isinstance(node.args[0], loop_ir.Load) \
                    and node.args[0].buffer == name:
                return attrs.evolve(node.args[0], dtype=dtype)
            return None

        def widen(node):
            if isinstance(node, loop_ir.Load) and node.buffer == name:
                return ex.cast(attrs.evolve(node, dtype=dtype), wide)
            return None
        return ex.transform(e, widen if widen_reads else uncast)

    def rewrite_body(body):
        out = []
        for s in body:
            if isinstance(s, loop_ir.Loop):
                s = attrs.evolve(s, body=rewrite_body(s.body))
            elif isinstance(s, loop_ir.Store) and s.buffer == name:
                s = attrs.evolve(s, index=tuple(map(rewrite_expr, s.index)), value=_stored(rewrite_expr(s.value), dtype))
            elif isinstance(s, loop_ir.Store):
                s = attrs.evolve(s, index=tuple(map(rewrite_expr, s.index)), value=rewrite_expr(s.value))
            elif isinstance(s, (loop_ir.Init, loop_ir.Accumulate)):
                s = attrs.evolve(s, value=rewrite_expr(s.value))
            out.append(s)
        return tuple(out)

    def swap(buffers):
        return tuple(narrowed if b.name == name else b for b in buffers)

    kernels = list(program.kernels)
    for position in (users if users is not None else range(len(kernels))):
        k = kernels[position]
        if any(b.name == name for b in k.inputs + k.outputs):
            kernels[position] = attrs.evolve(k, inputs=swap(k.inputs), outputs=swap(k.outputs),
                                             body=rewrite_body(k.body))
    return attrs.evolve(program, temporaries=swap(program.temporaries), kernels=tuple(kernels))


def _stored(value: ex.Expr, dtype: DType) -> ex.Expr:
    """``value`` cast to ``dtype``, or what it widened from where that has the dtype already."""
    if isinstance(value, ex.Op) and value.op == "cast" and value.args[0].dtype == dtype:
        return value.args[0]
    return ex.cast(value, dtype)

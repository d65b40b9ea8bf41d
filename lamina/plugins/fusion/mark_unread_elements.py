"""Mark the elements of a temporary that no kernel reads, so that its writer may skip them.

Attention's causal scores, too long for one kernel, are a product and a softmax. The
softmax reads each score as ``where(r0 - i1 >= 1, -inf, bmm[i0, i1, r0])``
(``fuse_readers_function_into_reduction`` leaves the mask there): what the product
stores above the diagonal is never used, and at 2048 tokens that is nearly half of the
scores it writes. When every load of a temporary, in every kernel that reads it, is the
branch that one ``where`` on coordinates alone does not choose, the other a constant,
and each load names the coordinates of the condition by variables of its own, the
temporary's buffer records that condition on its own axes (``Buffer.unread``). The
contraction schedule then skips the stores of a block where it holds at every output
(``contraction/unread_outputs``); any other writer may ignore it.

The rule recomputes every mark each time it runs, and runs after every rule that changes
what kernels read, so that the marks the pipeline settles on describe the final readers.
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from lamina.core.ir import expr as ex, loop_ir
from lamina.core.ir.expr import Expr
from lamina.core.target import Target
from lamina.plugins.fusion import analysis


class MarkUnreadElements:
    name = "mark_unread_elements"
    priority = 5
    """After the rules that change what a kernel reads, before dead buffers are removed."""

    def apply(self, program: loop_ir.Program, target: Target, knobs: Mapping[str, Any]) -> loop_ir.Program | None:
        writers: dict[str, list[loop_ir.Kernel]] = {}
        readers: dict[str, list[loop_ir.Kernel]] = {}
        for k in program.kernels:
            for b in k.outputs:
                writers.setdefault(b.name, []).append(k)
            for name in analysis.loaded_buffers(k):
                readers.setdefault(name, []).append(k)
        marked = {t.name: attrs.evolve(t, unread=_unread_where(t.name, writers.get(t.name, []), readers.get(t.name, [])))
                  for t in program.temporaries}
        if all(marked[t.name] == t for t in program.temporaries):
            return None
        return _with_buffers(program, marked)


def _with_buffers(program: loop_ir.Program, buffers: Mapping[str, loop_ir.Buffer]) -> loop_ir.Program:
    """``program`` with each buffer named in ``buffers`` replaced, wherever it appears."""

    def swap(found: tuple[loop_ir.Buffer, ...]) -> tuple[loop_ir.Buffer, ...]:
        return tuple(buffers.get(b.name, b) for b in found)

    kernels = tuple(attrs.evolve(k, inputs=swap(k.inputs), outputs=swap(k.outputs)) for k in program.kernels)
    return attrs.evolve(program, temporaries=swap(program.temporaries), kernels=kernels)


def _unread_where(buffer: str, writers: list[loop_ir.Kernel], readers: list[loop_ir.Kernel]) -> Expr | None:
    """The one condition on the buffer's axes under which no load of it is used, or None."""
    if len(writers) != 1 or not readers or any(r is writers[0] for r in readers):
        return None
    found: set[Expr] = set()
    for reader in readers:
        for s in loop_ir.statements(reader.body):
            for e in loop_ir.expressions(s):
                if not _masked(e, buffer, found):
                    return None
    return found.pop() if len(found) == 1 else None


def _masked(node: Expr, buffer: str, found: set[Expr]) -> bool:
    """Whether every load of ``buffer`` in ``node`` is the branch a ``where`` on coordinates does
    not choose, the other a constant; the conditions under which each is unused, restated on
    the buffer's axes, go to ``found``."""
    if isinstance(node, loop_ir.Load) and node.buffer == buffer:
        return False
    if isinstance(node, ex.Op) and node.op == "where":
        condition, chosen, otherwise = node.args
        for constant, element, unused in ((chosen, otherwise, condition), (otherwise, chosen, ex.negated(condition))):
            load = _element(element, buffer)
            if isinstance(constant, ex.Const) and load is not None:
                on_axes = _on_axes(unused, load)
                if on_axes is not None:
                    found.add(on_axes)
                    return True
    return all(_masked(child, buffer, found) for child in node.children())


def _element(node: Expr, buffer: str) -> loop_ir.Load | None:
    """The load of ``buffer`` that ``node`` is, perhaps cast, or None."""
    while isinstance(node, ex.Op) and node.op == "cast":
        node = node.args[0]
    return node if isinstance(node, loop_ir.Load) and node.buffer == buffer else None


def _on_axes(condition: Expr, load: loop_ir.Load) -> Expr | None:
    """``condition`` with each of the load's coordinate variables renamed to its axis, where
    the condition reads nothing from memory and only variables that name a coordinate."""
    axes: dict[str, Expr] = {}
    for axis, coordinate in enumerate(load.index):
        if isinstance(coordinate, ex.Var):
            if coordinate.name in axes:
                return None
            axes[coordinate.name] = loop_ir.axis_var(axis)
    if any(isinstance(n, loop_ir.Load) for n in ex.walk(condition)) or not ex.free_vars(condition) <= set(axes):
        return None
    return ex.substitute(condition, axes)

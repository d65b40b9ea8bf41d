"""Compute in a reduction the function that every reader applies to its result.

Attention's scores are a matmul whose readers (the softmax's row statistics, the
normalised P V product) each read ``where(col <= row, s[row, col] * scale, -inf)``,
never ``s`` alone. When every load of a reduction's result, in every kernel that reads
it, sits inside the same pointwise function of that one element (after renaming the
reader's variables to the element's coordinates), the reduction stores the function's
value instead and the readers load it as it is. The function then runs once per
element rather than once per read, and the reduction's epilogue says which of its
elements it need not compute: the contraction schedule skips a block whose every
output the causal mask replaces (``contraction/unneeded_blocks``). A mask on
coordinates alone stays in the readers too, ``where(col <= row, s[row, col], -inf)``,
which is the same value, so that a reader can skip reading what it replaces.

The function may read other buffers at the element's coordinates, provided they are
written before the reduction runs, and every reader must visit the whole of the
result along each axis, so that the reduction reads nothing out of bounds.
"""

from __future__ import annotations

import functools
from typing import Any, Mapping

import attrs

from lamina.core.ir import expr as ex, loop_ir
from lamina.core.ir.expr import Expr
from lamina.core.target import Target
from lamina.plugins.fusion import analysis


class FuseReadersFunctionIntoReduction:
    name = "fuse_readers_function_into_reduction"
    priority = 25
    """After the rules that fuse a reduction into its reader (the matmul_row_reduction plugin's at
    30 among them): a reduction they can fuse is better fused than stored."""

    def apply(self, program: loop_ir.Program, target: Target, knobs: Mapping[str, Any]) -> loop_ir.Program | None:
        outputs = {b.name for b in program.outputs}
        known = analysis.buffers(program)
        kernels = list(program.kernels)
        changed = False
        for position, producer in enumerate(kernels):
            store = None if analysis.pointwise(producer) else analysis.single_store(producer)
            if store is None or store.buffer in outputs:
                continue
            written_before = {b.name for b in program.inputs} | {
                b.name for k in kernels[:position] for b in k.outputs
            }
            readers = [i for i in range(position + 1, len(kernels)) if store.buffer in analysis.loaded_buffers(kernels[i])]
            loaded = {name for i in readers for name in analysis.loaded_buffers(kernels[i])}
            function = _common_function(store, known[store.buffer], tuple(kernels[i] for i in readers),
                                        frozenset(loaded & written_before))
            if function is None:
                continue
            computing = _store_function(producer, store, function)
            if analysis.nodes(computing) > analysis.MAX_EXPRESSION_NODES:
                continue
            kernels[position] = analysis.with_exact_inputs(computing, known)
            for i in readers:
                reader = _read_result(kernels[i], known[store.buffer], written_before)
                kernels[i] = analysis.with_exact_inputs(reader, known)
            changed = True
        return attrs.evolve(program, kernels=tuple(kernels)) if changed else None


@attrs.frozen
class _Read:
    """A maximal pointwise function of one element of the result in a reader, and the
    reader's index of that element."""

    function: Expr
    index: tuple[Expr, ...]


def _extents(kernel: loop_ir.Kernel) -> dict[str, int]:
    return {s.var: s.extent for s in loop_ir.statements(kernel.body) if isinstance(s, loop_ir.Loop)}


def _visits_whole_result(at: tuple[Expr, ...], shape: tuple[int, ...], extents: dict[str, int]) -> bool:
    """Whether ``at`` names each axis of the result by its own variable running over all of it
    (or 0 on an axis of size 1)."""
    names = []
    for coordinate, size in zip(at, shape):
        if isinstance(coordinate, ex.Var) and extents.get(coordinate.name) == size:
            names.append(coordinate.name)
        elif not (isinstance(coordinate, ex.Const) and coordinate.value == 0 and size == 1):
            return False
    return len(set(names)) == len(names)


def _function_of(node: Expr, buffer: str, at: tuple[Expr, ...], written_before: set[str]) -> bool:
    """Whether ``node`` is a pointwise function of ``buffer[at]`` alone: its variables are
    ``at``'s, it loads ``buffer`` only there, and it loads nothing written after the reduction."""
    own = {c.name for c in at if isinstance(c, ex.Var)}
    for n in ex.walk(node):
        if isinstance(n, ex.Var) and n.name not in own:
            return False
        if isinstance(n, loop_ir.Load):
            if n.buffer == buffer and n.index != at:
                return False
            if n.buffer != buffer and n.buffer not in written_before:
                return False
    return True


def _reads(node: Expr, buffer: str, shape, extents, written_before, found: list[_Read]) -> bool:
    """Collect into ``found`` the largest functions of one element of ``buffer`` in ``node``;
    False where a load of ``buffer`` is in none (read at a computed index or with other values)."""
    loads = [n for n in ex.walk(node) if isinstance(n, loop_ir.Load) and n.buffer == buffer]
    if not loads:
        return True
    at = loads[0].index
    if _visits_whole_result(at, shape, extents) and _function_of(node, buffer, at, written_before):
        found.append(_Read(node, at))
        return True
    if isinstance(node, loop_ir.Load):
        return False
    return all(_reads(child, buffer, shape, extents, written_before, found) for child in node.children())


@functools.lru_cache(maxsize=1024)
def _common_function(store: loop_ir.Store, result: loop_ir.Buffer, readers: tuple[loop_ir.Kernel, ...],
                     written_before: frozenset[str]) -> Expr | None:
    """The function every reader applies to an element of the result, written at the store's
    coordinates; None when they differ or when it is the element itself. ``written_before`` holds
    the buffers the readers load that are written before the reduction. Kept per question: the
    fusion driver asks again after every change, of readers that are the same objects then."""
    if not readers:
        return None
    found: list[_Read] = []
    for reader in readers:
        extents = _extents(reader)
        for s in loop_ir.statements(reader.body):
            for e in loop_ir.expressions(s):
                if not _reads(e, result.name, result.type.shape, extents, written_before, found):
                    return None
    renamed = set()
    for read in found:
        names = {c.name: s for c, s in zip(read.index, store.index) if isinstance(c, ex.Var)}
        renamed.add(ex.substitute(read.function, names))
    if len(renamed) != 1:
        return None
    (function,) = renamed
    if isinstance(function, loop_ir.Load) or function.dtype != result.type.dtype or _masked_already(store, function):
        return None
    return function


def _masked_already(store: loop_ir.Store, function: Expr) -> bool:
    """Whether ``function`` is only the mask that the stored value already applies (the one
    this rule leaves in the readers)."""
    stored = store.value
    if not (_is_where(function) and _is_where(stored) and function.args[0] == stored.args[0]):
        return False
    branches, kept = function.args[1:], stored.args[1:]
    for constant, element in ((0, 1), (1, 0)):
        if (isinstance(branches[constant], ex.Const) and branches[constant] == kept[constant]
                and isinstance(branches[element], loop_ir.Load) and branches[element].buffer == store.buffer):
            return True
    return False


def _is_where(e: Expr) -> bool:
    return isinstance(e, ex.Op) and e.op == "where"


def _store_function(producer: loop_ir.Kernel, store: loop_ir.Store, function: Expr) -> loop_ir.Kernel:
    def element(node: Expr) -> Expr | None:
        if isinstance(node, loop_ir.Load) and node.buffer == store.buffer:
            return ex.cast(store.value, node.dtype)
        return None

    stored = attrs.evolve(store, value=ex.transform(function, element))

    def rewrite(body: tuple[loop_ir.Stmt, ...]) -> tuple[loop_ir.Stmt, ...]:
        return tuple(
            stored if s is store else attrs.evolve(s, body=rewrite(s.body)) if isinstance(s, loop_ir.Loop) else s
            for s in body
        )

    return attrs.evolve(producer, body=rewrite(producer.body))


def _read_result(reader: loop_ir.Kernel, result: loop_ir.Buffer, written_before: set[str]) -> loop_ir.Kernel:
    """The reader with each function of an element replaced by a load of that element."""
    extents = _extents(reader)

    def replace(node: Expr) -> Expr:
        found: list[_Read] = []
        _reads(node, result.name, result.type.shape, extents, written_before, found)
        return _replaced(node, {
            id(r.function): _behind_mask(r.function, loop_ir.Load(result.name, r.index, result.type.dtype))
            for r in found
        })

    return attrs.evolve(reader, body=loop_ir.map_expressions(reader.body, replace))


def _behind_mask(function: Expr, element: loop_ir.Load) -> Expr:
    """``element`` behind the function's mask, where the function selects a constant by a
    condition on coordinates alone: the stored element already holds that constant there,
    and the mask tells the reader where it need not read it."""
    if not _is_where(function):
        return element
    condition, chosen, otherwise = function.args
    if any(isinstance(n, loop_ir.Load) for n in ex.walk(condition)):
        return element
    if isinstance(chosen, ex.Const):
        return ex.op("where", condition, chosen, element)
    if isinstance(otherwise, ex.Const):
        return ex.op("where", condition, element, otherwise)
    return element


def _replaced(node: Expr, by_identity: dict[int, Expr]) -> Expr:
    if id(node) in by_identity:
        return by_identity[id(node)]
    children = node.children()
    if not children:
        return node
    new = tuple(_replaced(c, by_identity) for c in children)
    return node if new == children else node.rebuild(new)

"""Constant folding: what a program computes from constants alone is computed once, at capture.

A value is constant when it depends only on shapes, Python numbers, lifted tensor
constants and non-persistent buffers (such as RoPE's inverse frequencies, which
models derive from their configuration and register with ``persistent=False``).
Those a user can still change are remembered: a call after one was written or replaced
captures and folds again (``call_binding.FoldedFrom``). Parameters and persistent
buffers are the model's state, which a user may update without recompiling: they are
never folded. Nondeterministic ops (random numbers) are never folded either.

Where a constant value meets the rest of the program it becomes a graph input of
kind ``constant``, evaluated here with PyTorch; every constant op before it leaves
the graph, so no kernel ever computes it. The exception is an op with no tensor
inputs at all (``arange``, ``full``) that feeds the program directly: it stays an
op, because a kernel that reads it computes it for free from its coordinates. So does
a boolean mask built from such ops by comparisons, logic and views alone (``triu`` of
``ones``, a causal mask): read from memory it is a mask like any other, while computed
from coordinates it tells the kernels that read it which of their outputs it replaces,
and a matmul whose outputs a causal mask replaces skips those blocks' products. A boolean
constant built any other way (a model's causal mask from its position ids, through
indexing and cumulative sums) that turns out to be a triangle, ``ones(S, T).tril(k)`` or
``.triu(k)`` repeated over its leading axes, is computed from coordinates too (``triangles``).
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs
import torch
from torch.export.graph_signature import InputKind


@attrs.frozen
class Folding:
    """Which nodes of an exported graph are folded, and the constant inputs they leave behind.

    ``inputs`` maps the name of each node whose value becomes a ``constant`` graph input
    to that value; ``dropped`` names every other folded node, which leaves the graph.
    ``aliases`` maps a folded node whose value equals an earlier input's (each layer's
    own view of the same rotary table) to that input, which it is read as.
    """

    inputs: Mapping[str, torch.Tensor]
    dropped: frozenset[str]
    aliases: Mapping[str, str] = attrs.field(factory=dict)
    triangles: Mapping[str, "Triangle"] = attrs.field(factory=dict)
    """Folded boolean nodes whose value is a triangle, which the graph computes instead of reading."""


@attrs.frozen
class Triangle:
    """``ones(rows, columns, dtype=bool).triu(diagonal)`` (``upper``) or ``.tril(diagonal)``,
    expanded to ``shape``."""

    upper: bool
    diagonal: int
    shape: tuple[int, ...]


def triangle_of(value: torch.Tensor) -> Triangle | None:
    """The triangle a boolean tensor is, over its last two axes of at least two rows and
    columns and the same on every leading index, or None (also where it is all true or all
    false)."""
    if value.dtype != torch.bool or value.dim() < 2 or min(value.shape[-2:]) < 2:
        return None
    rows, columns = value.shape[-2:]
    slices = value.reshape(-1, rows, columns)
    first = slices[0]
    if not bool((slices == first).all()) or bool(first.all()) or not bool(first.any()):
        return None
    offset = torch.arange(columns, device=value.device)[None, :] - torch.arange(rows, device=value.device)[:, None]
    kept, dropped = offset[first], offset[~first]
    shape = tuple(value.shape)
    if int(kept.max()) < int(dropped.min()):
        return Triangle(False, int(kept.max()), shape)
    if int(kept.min()) > int(dropped.max()):
        return Triangle(True, int(kept.min()), shape)
    return None


def _constant_placeholders(exported) -> dict[str, torch.Tensor]:
    found = {}
    for spec in exported.graph_signature.input_specs:
        if spec.kind == InputKind.CONSTANT_TENSOR:
            found[spec.arg.name] = exported.constants[spec.target]
        elif spec.kind == InputKind.BUFFER and not spec.persistent:
            found[spec.arg.name] = exported.constants.get(spec.target, exported.state_dict.get(spec.target))
    return {name: value for name, value in found.items() if isinstance(value, torch.Tensor)}


def _tensor_inputs(fx_node) -> list:
    found = []
    torch.fx.node.map_arg((fx_node.args, fx_node.kwargs), found.append)
    return found


def _may_fold(fx_node) -> bool:
    target = fx_node.target
    if not isinstance(target, torch._ops.OpOverload):
        return False
    if torch.Tag.nondeterministic_seeded in target.tags:
        return False
    value = fx_node.meta.get("val")
    return value is None or isinstance(value, torch.Tensor)


def _evaluate(fx_node, values: dict[str, Any]) -> Any:
    args, kwargs = torch.fx.node.map_arg((fx_node.args, fx_node.kwargs), lambda n: values[n.name])
    with torch.no_grad():
        return fx_node.target(*args, **kwargs)


COORDINATE_OPS = frozenset({
    "aten.full.default", "aten.ones.default", "aten.zeros.default", "aten.scalar_tensor.default",
    "aten.arange.default", "aten.arange.start", "aten.arange.start_step",
    "aten.unsqueeze.default", "aten.view.default", "aten.expand.default", "aten.slice.Tensor",
    "aten.triu.default", "aten.tril.default", "aten.add.Tensor", "aten.sub.Tensor",
    "aten.eq.Scalar", "aten.eq.Tensor", "aten.ne.Scalar", "aten.ne.Tensor", "aten.lt.Scalar", "aten.lt.Tensor",
    "aten.le.Scalar", "aten.le.Tensor", "aten.gt.Scalar", "aten.gt.Tensor", "aten.ge.Scalar", "aten.ge.Tensor",
    "aten.logical_and.default", "aten.logical_or.default", "aten.logical_not.default",
    "aten.bitwise_and.Tensor", "aten.bitwise_or.Tensor", "aten.bitwise_not.default",
})
"""Ops that lamina computes from coordinates and constants alone, reading no memory."""


def _coordinate_masks(exported, values: dict[str, Any]) -> set[str]:
    """The nodes of every boolean mask that the program reads and that is built by
    ``COORDINATE_OPS`` alone, with the nodes it is built from."""
    built_from_coordinates = set()
    for fx_node in exported.graph.nodes:
        if (fx_node.op == "call_function" and str(fx_node.target) in COORDINATE_OPS
                and all(n.name in built_from_coordinates for n in _tensor_inputs(fx_node))):
            built_from_coordinates.add(fx_node.name)
    kept: set[str] = set()
    for fx_node in exported.graph.nodes:
        value = values.get(fx_node.name)
        if (fx_node.name in built_from_coordinates and isinstance(value, torch.Tensor) and value.dtype == torch.bool
                and any(user.name not in values for user in fx_node.users)):
            kept |= _cone(fx_node)
    return kept


def _cone(fx_node) -> set[str]:
    found, pending = set(), [fx_node]
    while pending:
        node = pending.pop()
        if node.name not in found:
            found.add(node.name)
            pending += _tensor_inputs(node)
    return found


def fold_constants(exported) -> Folding:
    """Evaluate the constant part of ``exported``'s graph."""
    values: dict[str, Any] = dict(_constant_placeholders(exported))
    for fx_node in exported.graph.nodes:
        if fx_node.op != "call_function" or not _may_fold(fx_node):
            continue
        if all(n.name in values for n in _tensor_inputs(fx_node)):
            try:
                values[fx_node.name] = _evaluate(fx_node, values)
            except Exception:
                continue
    for name in _coordinate_masks(exported, values):
        values.pop(name, None)
    inputs, dropped, aliases = {}, set(), {}
    for fx_node in exported.graph.nodes:
        if fx_node.name not in values:
            continue
        read_outside = any(user.name not in values for user in fx_node.users)
        if not read_outside:
            dropped.add(fx_node.name)
        elif fx_node.op == "placeholder" or _tensor_inputs(fx_node):
            value = values[fx_node.name].detach()
            same = next((name for name, v in inputs.items() if _identical(v, value)), None)
            if same is None:
                inputs[fx_node.name] = value
            else:
                aliases[fx_node.name] = same
                dropped.add(fx_node.name)
    triangles = {name: t for name, value in inputs.items() if (t := triangle_of(value)) is not None}
    inputs = {name: value for name, value in inputs.items() if name not in triangles}
    return Folding(inputs, frozenset(dropped), aliases, triangles)


def _identical(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.device == b.device and bool(torch.equal(a, b))

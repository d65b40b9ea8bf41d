"""Torch IR -> Tensor IR: every node rewritten by the decomposition registered for its op.

Nodes that no output depends on are dropped first: lamina's programs have no side
effects, and a graph may keep a ``getitem`` for every result of an op with several,
read or not. Before anything is built, every node whose op has no decomposition is
collected, so that one error lists them all, each with the user's source line. A
decomposition that crashes is reported as a bug of that decomposition, with the node
and the line it came from; one that returns a value of the wrong shape or dtype is
caught here, before any later stage can be misled by it.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Mapping

from lamina.core.errors import LaminaError, SymbolicSizeError, UnsupportedOpError
from lamina.core.ir import tensor_ir, torch_ir
from lamina.core.ir.tensor_builder import TensorBuilder
from lamina.core.providers import Decomposition


def live_nodes(graph: torch_ir.Graph) -> list[torch_ir.Node]:
    """The nodes that some output of ``graph`` depends on, in graph order."""
    live = set(graph.outputs)
    kept = []
    for node in reversed(graph.nodes):
        if node.name in live:
            kept.append(node)
            live.update(ref.name for ref in torch_ir.node_refs(node))
    return kept[::-1]


def unsupported_ops(graph: torch_ir.Graph, ops: Mapping[str, Decomposition]) -> list[tuple[str, str]]:
    """``(op, source line)`` of every live node that no decomposition handles, each once, in graph order."""
    found: list[tuple[str, str]] = []
    for node in live_nodes(graph):
        entry = (node.target, str(node.source) if node.source else "")
        if node.target not in ops and entry not in found:
            found.append(entry)
    return found


def decompose(graph: torch_ir.Graph, ops: Mapping[str, Decomposition]) -> tensor_ir.Program:
    """Rewrite ``graph`` with the decompositions ``ops`` (ATen op name -> decomposition)."""
    missing = unsupported_ops(graph, ops)
    if missing:
        raise UnsupportedOpError(missing)
    builder = TensorBuilder(graph.inputs, reserved=[node.name for node in graph.nodes])
    for node in live_nodes(graph):
        with builder.at(node), _located(node):
            result = _run(ops[node.target], builder, node)
            builder.bind(node, result)
            _check_type(builder, node)
    outputs = [builder.value(torch_ir.Ref(name)) for name in graph.outputs]
    return builder.program(outputs)


@contextlib.contextmanager
def _located(node: torch_ir.Node) -> Iterator[None]:
    """A size known only at run time that an op cannot take, said with the op and its source line."""
    try:
        yield
    except SymbolicSizeError as e:
        raise SymbolicSizeError(f"{node.target} ({_where(node)}) cannot take it: {e}") from e


def _where(node: torch_ir.Node) -> str:
    return f"node {node.name}" + (f" at {node.source}" if node.source else "")


def _run(decomposition: Decomposition, builder: TensorBuilder, node: torch_ir.Node):
    try:
        return decomposition(builder, node)
    except LaminaError:
        raise
    except Exception as error:
        raise LaminaError(
            f"the decomposition of {node.target} failed on {_where(node)}: {type(error).__name__}: {error}\n"
            f"This is a bug in the plugin that registered {node.target}; "
            "disable that plugin or keep the op out of the program."
        ) from error


def _check_type(builder: TensorBuilder, node: torch_ir.Node) -> None:
    results = builder.results(node.name)
    expected = [(0, node.type)] if node.type is not None and len(results) == 1 else []
    expected += [(k, t) for k, t in enumerate(node.results[:len(results)]) if t is not None]
    for position, wanted in expected:
        built = builder.type(results[position])
        if built != wanted:
            which = f" as result {position}" if node.results else ""
            raise LaminaError(
                f"the decomposition of {node.target} on {_where(node)} produced {built}{which}, "
                f"but PyTorch computes {wanted}; this is a bug in the plugin that registered {node.target}"
            )

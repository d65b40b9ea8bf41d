"""Torch IR graphs written directly, as capture would write them, with PyTorch's results alongside.

A sample of an op becomes a graph whose inputs are its tensor arguments; a
non-contiguous sample is a graph input followed by the view that reaches it
(``transpose`` or a strided ``slice``), so the op reads its operand through an IndexMap
as in a real program. Each node's type comes from running PyTorch on the same
tensors; an op with several results is followed by ``getitem`` nodes, as capture
writes them. No ``torch.export`` is involved, so a sample costs microseconds.
"""

from __future__ import annotations

from typing import Any, Callable

import attrs
import torch

from lamina.core.ir import dtypes, torch_ir
from lamina.testing.cases.database import aten_op
from lamina.testing.cases.samples import Case, T


@attrs.frozen(eq=False)
class GraphSample:
    graph: torch_ir.Graph
    #: The tensors the graph inputs take, in order.
    inputs: tuple[torch.Tensor, ...]
    #: What PyTorch computes, one tensor per graph output.
    expected: tuple[torch.Tensor, ...]


@attrs.frozen(eq=False)
class Value:
    """A value of the graph being written, with what PyTorch computes for it."""

    ref: torch_ir.Ref
    eager: Any


def _dtype(dtype: torch.dtype) -> dtypes.DType:
    return dtypes.BY_NAME[str(dtype).removeprefix("torch.")]


def _type(tensor: torch.Tensor) -> torch_ir.TensorType:
    return torch_ir.TensorType(tuple(tensor.shape), _dtype(tensor.dtype))


def _split(value: Any) -> tuple[Any, Any]:
    """``(graph argument, eager argument)``."""
    if isinstance(value, Value):
        return value.ref, value.eager
    if isinstance(value, (list, tuple)):
        pairs = [_split(v) for v in value]
        return tuple(p[0] for p in pairs), [p[1] for p in pairs]
    if isinstance(value, torch.dtype):
        return _dtype(value), value
    return value, value


class GraphWriter:
    def __init__(self):
        self.inputs: list[torch_ir.Input] = []
        self.nodes: list[torch_ir.Node] = []
        self.feeds: list[torch.Tensor] = []

    def input(self, tensor: torch.Tensor) -> Value:
        name = f"arg{len(self.inputs)}"
        self.inputs.append(torch_ir.Input(name, _type(tensor)))
        self.feeds.append(tensor)
        return Value(torch_ir.Ref(name), tensor)

    def sample(self, spec: T, dtype: str) -> Value:
        """A graph input made from ``spec``, reached through its view when it is not contiguous."""
        base, view = spec.make(dtype)
        value = self.input(base)
        if view is base:
            return value
        if spec.layout == "transposed":
            return self.call("aten.transpose.int", value, base.dim() - 2, base.dim() - 1)
        return self.call("aten.slice.Tensor", value, base.dim() - 1, 0, base.shape[-1], 2)

    def call(self, target: str, *args: Any, reference: Callable[..., Any] | None = None, **kwargs: Any) -> Value | tuple[Value, ...]:
        """Append a node for ``target``; an op with several results gives one ``getitem`` value per result."""
        graph_args, eager_args = zip(*(_split(a) for a in args)) if args else ((), ())
        graph_kwargs = {k: _split(v) for k, v in kwargs.items()}
        with torch.no_grad():
            result = (reference or aten_op(target))(*eager_args, **{k: v[1] for k, v in graph_kwargs.items()})
        node = self._node(target, tuple(graph_args), tuple((k, v[0]) for k, v in graph_kwargs.items()), result)
        if isinstance(result, (tuple, list)):
            return tuple(self._node("getitem", (node.ref, k), (), r) for k, r in enumerate(result))
        return node

    def _node(self, target: str, args: tuple, kwargs: tuple, result: Any) -> Value:
        name = f"{(target.split('.') + [target])[1].lstrip('_')}_{len(self.nodes)}"
        value_type = _type(result) if isinstance(result, torch.Tensor) else None
        results = ()
        if isinstance(result, (tuple, list)):
            results = tuple(_type(r) if isinstance(r, torch.Tensor) else None for r in result)
        self.nodes.append(torch_ir.Node(name, target, args, kwargs, value_type, results=results))
        return Value(torch_ir.Ref(name), result)

    def finish(self, outputs) -> GraphSample:
        outputs = tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)
        graph = torch_ir.Graph(self.inputs, self.nodes, [o.ref.name for o in outputs])
        torch_ir.verify_graph(graph)
        return GraphSample(graph, tuple(self.feeds), tuple(o.eager.detach() for o in outputs))


def _materialise(value: Any, writer: GraphWriter, dtype: str) -> Any:
    if isinstance(value, T):
        return writer.sample(value, dtype)
    if isinstance(value, (list, tuple)):
        return [_materialise(v, writer, dtype) for v in value]
    return value


def build_sample(op: str, case: Case, dtype: str, reference: Callable[..., Any]) -> GraphSample:
    writer = GraphWriter()
    args = [_materialise(a, writer, dtype) for a in case.args]
    kwargs = {k: _materialise(v, writer, dtype) for k, v in case.kwargs.items()}
    return writer.finish(writer.call(op, *args, reference=reference, **kwargs))

"""Torch IR from an ATen-level FX graph, as ``torch.compile`` hands it to a backend.

Every placeholder is an argument of the call (AOTAutograd lifts parameters and buffers
to arguments). The one state the graph holds itself is the tensors that Dynamo lifts
from the program's code into attributes of the graph module (``torch.tensor([])``,
which a Hugging Face cache starts from): a ``get_attr`` of such a tensor becomes a graph
input of kind ``constant``, passed at each call like the constants of a captured
program. Any other ``get_attr`` is a submodule (control flow), which lamina does not
compile. Outputs that the program does not compute (an input returned as it is, a None)
are passed through at call time rather than compiled: ``outputs`` says where each
output of the graph comes from. A number computed from symbolic sizes that the graph returns (a
cache's new length) is worked out at each call from the sizes of the arguments.

An input the program updates (a key-value cache) arrives as ``copy_(input, new_value)`` at
the end of the graph, as AOTAutograd keeps an inference graph's input mutations: the new
value is computed like an output, and ``writes`` says which argument it is written into. The
graph names each such output as the input's update (``torch_ir.Graph.updates``), so that the
program may write it in place.
"""

from __future__ import annotations

import functools
from typing import Any

import attrs
import torch

from lamina.core.errors import LaminaError, SymbolicSizeError
from lamina.core.ir import dtypes, expr as ex, sizes, torch_ir
from lamina.frontends.torch.call_binding import Argument, Computed, View, view_chain
from lamina.frontends.torch.capture import Captured, _dtype, _node, _tensor_type
from lamina.frontends.torch.symbolic_sizes import SYMBOLIC_NUMBERS, naming, size_of


@attrs.frozen
class Constant:
    value: Any


@attrs.frozen
class SizeValue:
    """A number that the graph computes from its symbolic sizes and returns: ``expression`` in the
    symbols, each read from an argument's shape at the call (``given``: symbol, argument, axis)."""

    expression: sizes.Size
    given: tuple[tuple[str, int, int | None], ...]
    """Each symbol's argument and axis; no axis where the argument is the number itself."""

    def value(self, args: Any) -> int:
        return sizes.evaluate(self.expression, {
            name: int(args[position] if axis is None else args[position].shape[axis])
            for name, position, axis in self.given})


Source = Computed | Argument | View | Constant | SizeValue


@attrs.frozen(eq=False)
class FxProgram:
    captured: Captured
    outputs: tuple[Source, ...] = attrs.field(converter=tuple)
    writes: tuple[tuple[int, Source], ...] = attrs.field(default=(), converter=tuple)
    """(argument position, its new value) for each argument the program updates."""
    lengths: tuple[int, ...] = attrs.field(default=(), converter=tuple)
    """The arguments that are sizes the program needs (numbers): each passed as a ``length_tensor``."""


def is_write_to_argument(node: torch.fx.Node) -> bool:
    """Whether ``node`` is ``copy_(placeholder, value)``: the program updates one of its arguments."""
    return (node.op == "call_function" and node.target is torch.ops.aten.copy_.default
            and isinstance(node.args[0], torch.fx.Node) and node.args[0].op == "placeholder")


def fx_to_torch_ir(graph_module: torch.fx.GraphModule) -> FxProgram:
    """``graph_module`` (core ATen ops, shapes in each node's ``meta['val']``) as Torch IR.

    Nodes that nothing reads are dropped first: AOTAutograd keeps a ``getitem`` for every
    result of an op with several, some of types lamina has no use for."""
    graph_module.graph.eliminate_dead_code()
    with naming(graph_module):
        return _read(graph_module)


def _read(graph_module: torch.fx.GraphModule) -> FxProgram:
    inputs, positions, nodes = [], [], []
    constants: dict[str, torch.Tensor] = {}
    placeholders: dict[str, int] = {}
    numbers: dict[str, int] = {}  # a symbol passed as a number: its argument
    computed: list[str] = []
    sources: list[Source] = []
    written: list[tuple[torch.fx.Node, Any]] = []
    updated: dict[str, int] = {}
    writes: list[tuple[int, Source]] = []
    for fx_node in graph_module.graph.nodes:
        if fx_node.op == "placeholder":
            placeholders[fx_node.name] = len(placeholders)
            if isinstance(fx_node.meta.get("val"), torch.SymInt):
                symbol = size_of(fx_node.meta["val"], fx_node.name)
                if isinstance(symbol, ex.Var):
                    numbers.setdefault(symbol.name, placeholders[fx_node.name])
            if isinstance(fx_node.meta.get("val"), torch.Tensor):
                inputs.append(torch_ir.Input(fx_node.name, _tensor_type(fx_node), "user"))
                positions.append(placeholders[fx_node.name])
        elif fx_node.op == "get_attr" and isinstance(_attribute(graph_module, fx_node.target), torch.Tensor):
            constants[fx_node.name] = _attribute(graph_module, fx_node.target)
            inputs.append(torch_ir.Input(fx_node.name, _constant_type(fx_node, constants[fx_node.name]), "constant"))
            positions.append(None)
        elif is_write_to_argument(fx_node):
            if any(user.op != "output" for user in fx_node.users):
                raise LaminaError(f"{fx_node.name} (a copy into the argument {fx_node.args[0].name}) is read by "
                                  f"{', '.join(u.name for u in fx_node.users)}; lamina writes arguments at the end")
            written.append((fx_node.args[0], fx_node.args[1]))
            updated[fx_node.name] = placeholders[fx_node.args[0].name]  # returned: the argument, updated
        elif fx_node.op == "call_function" and isinstance(fx_node.meta.get("val"), SYMBOLIC_NUMBERS):
            continue  # a number computed from sizes: the nodes that use it hold its expression
        elif fx_node.op == "call_function":
            nodes.append(_node(fx_node))
        elif fx_node.op == "output":
            returned = _flat_outputs(fx_node.args[0])
            new_values = [value for _, value in written]
            directly = {value.name for value in (*returned, *new_values) if isinstance(value, torch.fx.Node)}
            for value in returned:
                sources.append(_size_value(value, inputs, positions, numbers) if _is_number(value) else
                               _source(value, {**placeholders, **updated}, computed, directly))
            for target, value in written:
                writes.append((placeholders[target.name], _source(value, placeholders, computed, directly)))
            if len(computed) < len(directly - set(placeholders) - set(updated)):
                nodes = _reaching(nodes, computed)
        else:
            raise LaminaError(f"the graph has a {fx_node.op} node ({fx_node.name}): "
                              "control flow and submodule calls are not supported")
    lengths = _lengths_needed(nodes, inputs, numbers)
    for name, position in lengths.items():
        inputs.append(torch_ir.Input(f"length_{name}", torch_ir.TensorType((sizes.symbol(int(name[1:])),),
                                                                            LENGTH_DTYPE), "user"))
        positions.append(position)
    tensor_inputs = {i.name for i in inputs}
    updates = [(target.name, computed[source.index]) for (target, _), (_, source) in zip(written, writes)
               if isinstance(source, Computed) and target.name in tensor_inputs]
    graph = torch_ir.Graph(inputs, nodes, computed, updates)
    torch_ir.verify_graph(graph)
    _check_symbols_are_given(graph)
    return FxProgram(Captured(graph, positions, constants), sources, writes, lengths.values())


LENGTH_DTYPE = dtypes.uint8


def _lengths_needed(nodes: list[torch_ir.Node], inputs: list[torch_ir.Input], numbers: dict[str, int]) -> dict[str, int]:
    """The symbols that the graph's sizes use, that no input tensor's shape gives and a number argument
    is (a cache's length that Dynamo made symbolic): each with that argument's position. The program
    takes such a number as a tensor of that length that no kernel reads (``length_s1``), because a
    program's symbols take their values from its inputs' shapes."""
    given = {sizes.given_symbol(size) for i in inputs for size in i.type.shape}
    used = set()
    for node in nodes:
        used |= sizes.symbols(_flat(node.args) + _flat(tuple(v for _, v in node.kwargs)))
        used |= sizes.symbols(node.type.shape) if node.type is not None else set()
    return {name: numbers[name] for name in sorted(used - given) if name in numbers}


def length_tensor(length: int, device: torch.device) -> torch.Tensor:
    """A tensor of ``length`` elements that no kernel reads, for a size that is a number argument:
    one byte of the device, seen ``length`` times (stride 0)."""
    return _one_byte(device).expand(int(length))


@functools.cache
def _one_byte(device: torch.device) -> torch.Tensor:
    return torch.zeros((1,), dtype=torch.uint8, device=device)


def _is_number(value: Any) -> bool:
    return isinstance(value, torch.fx.Node) and isinstance(value.meta.get("val"), SYMBOLIC_NUMBERS)


def _size_value(fx_node: torch.fx.Node, inputs: list[torch_ir.Input], positions: list[int | None],
                numbers: dict[str, int]) -> SizeValue:
    """The returned number ``fx_node``, worked out at each call from the arguments' sizes, or from
    the arguments that are the symbols themselves (``numbers``)."""
    number = fx_node.meta["val"]
    if not isinstance(number, torch.SymInt):
        raise SymbolicSizeError(f"{fx_node.name} returns {number}, a number of symbolic sizes that is no integer")
    expression = size_of(number, fx_node.name)
    given: dict[str, tuple[str, int, int | None]] = {name: (name, position, None) for name, position in numbers.items()}
    for graph_input, position in zip(inputs, positions):
        for axis, size in enumerate(graph_input.type.shape):
            if position is not None and isinstance(size, ex.Var) and sizes.is_symbol_name(size.name):
                given.setdefault(size.name, (size.name, position, axis))
    missing = sorted(sizes.symbols(expression) - set(given))
    if missing:
        raise SymbolicSizeError(f"{fx_node.name} returns {expression}, of {', '.join(missing)}, the size of no "
                                "input tensor nor an argument")
    return SizeValue(expression, tuple(given[name] for name in sorted(sizes.symbols(expression))))


def _check_symbols_are_given(graph: torch_ir.Graph) -> None:
    """Each symbol takes its value from a size of an input tensor at each call (a number argument's
    from its ``length_tensor``); one that no input's shape gives (a size computed from tensor data) is a
    ``SymbolicSizeError``, and the graph is compiled for the call's values instead."""
    given = {sizes.given_symbol(size) for i in graph.inputs for size in i.type.shape}
    used = set()
    for node in graph.nodes:
        used |= sizes.symbols(_flat(node.args) + _flat(tuple(v for _, v in node.kwargs)))
        used |= sizes.symbols(node.type.shape) if node.type is not None else set()
    missing = sorted(used - given)
    if missing:
        raise SymbolicSizeError(f"{', '.join(missing)} is known only at run time but is the size of no input "
                                "tensor nor a number argument")


def _flat(values: tuple) -> list:
    found = []
    for v in values:
        found += _flat(tuple(v)) if isinstance(v, (list, tuple)) else [v]
    return found


def _attribute(graph_module: torch.fx.GraphModule, target: str):
    value = graph_module
    for part in target.split("."):
        value = getattr(value, part, None)
    return value


def _constant_type(fx_node, value: torch.Tensor) -> torch_ir.TensorType:
    return torch_ir.TensorType(tuple(value.shape), _dtype(value.dtype, fx_node))


def _flat_outputs(value: Any) -> tuple:
    return tuple(value) if isinstance(value, (list, tuple)) else (value,)


def _source(value: Any, placeholders: dict[str, int], computed: list[str], returned: set[str]) -> Source:
    """Where an output comes from: an argument or another output returned as it is or as a view
    of it (as eager returns them), a value, else a computed output."""
    if not isinstance(value, torch.fx.Node):
        return Constant(value)
    root, steps = view_chain(value)
    if root.name in placeholders:
        base = Argument(placeholders[root.name])
    elif steps and root.name in returned:
        base = _computed(root.name, computed)
    else:
        return _computed(value.name, computed)
    return View(base, steps) if steps else base


def _computed(name: str, computed: list[str]) -> Computed:
    if name not in computed:
        computed.append(name)
    return Computed(computed.index(name))


def _reaching(nodes: list[torch_ir.Node], outputs: list[str]) -> list[torch_ir.Node]:
    """``nodes`` less those no output reads: views of arguments and outputs, which each call makes instead."""
    needed = set(outputs)
    for node in reversed(nodes):
        if node.name in needed:
            needed |= {ref.name for ref in torch_ir.node_refs(node)}
    return [node for node in nodes if node.name in needed]

"""Capture a PyTorch program as Torch IR with ``torch.export``.

The program (an ``nn.Module`` or a plain function) is exported for the shapes and
dtypes of the example inputs, lowered to core ATen (node by node where that is all it needs,
``core_aten``, else by tracing it again), and written as a
``torch_ir.Graph``: one node per op, with its shape, dtype and the user's source line.
Module state (parameters and persistent buffers) becomes graph inputs, passed at run
time rather than folded into the program: each call reads them from the module by
their path, so that updating or replacing a weight needs no recompilation. What depends
only on shapes and constants (a causal mask, RoPE's cosines and sines) is folded:
computed once here, it enters the graph as an input of kind ``constant`` (see
``folding``), except a mask that is a triangle, which the graph computes from
coordinates; the tensors it was computed from are remembered, so that a call after
one of them changed captures again (``call_binding``). An output that eager returns
as an input, as module state, as another output or as a view of them is returned so
by each call in place of the graph's copy. Export runs once per set of input shapes and
dtypes; callers cache.

``DEFAULT_KEEP`` holds these composites whole through the lowering to core ATen,
because lamina decomposes each better than ATen's default does:

- ``linear``: its weight's transpose folds into the matmul's operand read, instead
  of a separate permute and ``addmm``;
- ``silu``: one Elementwise rather than two;
- ``softmax`` / ``log_softmax``: the numerically stable, max-subtracted form;
- ``scaled_dot_product_attention``: grouped key/value heads read by index (never
  repeated in memory), the causal mask from coordinates, scores and softmax in
  float32 (ATen's default turns it into bmm, ``_softmax`` and a materialised mask);
- ``rms_norm``: one mean of squares in float32, which the fusion rules make one kernel.

That covers what Llama and Qwen2 models export (their RMSNorm is written out as
pow, mean, rsqrt and mul, which decompose as they come).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import types
import warnings
from typing import Any, Callable, Iterator, Mapping, Sequence

import attrs
import sympy
import torch
from torch.export.graph_signature import InputKind, OutputKind

from lamina.core.errors import LaminaError
from lamina.core.ir import dtypes, expr as ex, torch_ir
from lamina.core.ir.sizes import Size
from lamina.frontends.torch.call_binding import (
    Argument, CapturedTensors, Computed, FoldedFrom, Path, Source, State, View, lookup, view_chain,
)
from lamina.frontends.torch.core_aten import rewritten
from lamina.frontends.torch.containers import (
    flatten_call, register_library_containers, returning_leaves, sorted_keywords,
)
from lamina.frontends.torch.folding import Folding, Triangle, fold_constants
from lamina.frontends.torch.source import source_location
from lamina.frontends.torch.symbolic_sizes import SYMBOLIC_NUMBERS, naming, reading_symbols, size_of

DEFAULT_KEEP: tuple[str, ...] = (
    "aten.linear.default",
    "aten.silu.default",
    "aten.softmax.int",
    "aten.log_softmax.int",
    "aten.scaled_dot_product_attention.default",
    "aten.rms_norm.default",
)
"""Composite ops kept whole instead of lowered to core ATen (why each: see the module docstring).

Keep only ops that a registered plugin decomposes: any other comes back from the
decomposition stage as an unsupported op.
"""

_ALLOCATION_KWARGS = frozenset({"device", "layout", "pin_memory", "memory_format"})
"""Where and how PyTorch would allocate a result: lamina decides that itself."""

_INPUT_KINDS = {
    InputKind.PARAMETER: "parameter",
    InputKind.BUFFER: "buffer",
    InputKind.CONSTANT_TENSOR: "constant",
}


@attrs.frozen(eq=False)
class Captured:
    """A captured program: its graph, and how to gather the graph's inputs at each call.

    ``user_input_positions[i]`` is the position, among the flattened leaves of a call's
    arguments (``containers.flatten_call``), of the one that feeds graph input ``i``, or
    None for module state and constants, which ``constants`` holds by input name (module
    state as ``module`` holds it at the time, under its path in ``state``).
    ``folded_from`` are the tensors whose values the program holds as they were at
    capture. ``output_sources`` says where each of the program's flat outputs comes from
    (None: the graph's outputs in order), and ``output_structure`` puts them back into
    what the program returns (None: a tensor, or a tuple of them).
    """

    graph: torch_ir.Graph
    user_input_positions: tuple[int | None, ...] = attrs.field(converter=tuple)
    constants: Mapping[str, torch.Tensor]
    output_structure: Any = None
    state: Mapping[str, Path] = attrs.field(factory=dict)
    folded_from: tuple[FoldedFrom, ...] = ()
    output_sources: tuple[Source, ...] | None = None
    module: torch.nn.Module | None = None
    size_ranges: Mapping[str, tuple[int, int | None]] = attrs.field(factory=dict)
    """For each size known only at run time (``s0``), the least and the greatest value (None:
    unbounded) that the program was captured for, as ``torch.export``'s ``Dim`` declared them."""


class _FunctionModule(torch.nn.Module):
    """A plain function as a module, so that export can trace it; its parameters keep their names.

    The modules the function reaches by name (a closure's, a global, a bound method's owner)
    become its submodules, so that their parameters and buffers are module state, read at each
    call, rather than constants lifted from the code, which a replaced weight would not reach."""

    def __init__(self, fn: Callable):
        super().__init__()
        self.forward = _named_forward(fn)
        for name, module in _modules_used_by(fn).items():
            if not hasattr(self, name):
                self.add_module(name, module)


def _modules_used_by(fn: Callable) -> dict[str, torch.nn.Module]:
    """The modules ``fn`` names: its owner's (``self``), its closure's and its globals'."""
    target = fn if isinstance(fn, (types.FunctionType, types.MethodType)) else getattr(fn, "__call__", fn)
    found: dict[str, torch.nn.Module] = {}
    if isinstance(target, types.MethodType):
        owner = target.__self__
        if isinstance(owner, torch.nn.Module):
            found["self"] = owner
        else:
            found.update((k, v) for k, v in getattr(owner, "__dict__", {}).items() if isinstance(v, torch.nn.Module))
        target = target.__func__
    if isinstance(target, types.FunctionType):
        for name, cell in zip(target.__code__.co_freevars, target.__closure__ or ()):
            with contextlib.suppress(ValueError):
                if isinstance(cell.cell_contents, torch.nn.Module):
                    found[name] = cell.cell_contents
        for name in target.__code__.co_names:
            if isinstance(target.__globals__.get(name), torch.nn.Module):
                found[name] = target.__globals__[name]
    return found


def _named_forward(fn: Callable) -> Callable:
    """``fn`` itself under the name ``forward``.

    The stack traces that export records keep only frames of functions named
    ``forward``; renaming the user's function (or method, or ``__call__``) keeps its
    lines in them.
    """
    target = fn
    if not isinstance(fn, (types.FunctionType, types.MethodType)):
        target = getattr(fn, "__call__", fn)
    if isinstance(target, types.MethodType) and isinstance(target.__func__, types.FunctionType):
        return types.MethodType(_renamed(target.__func__), target.__self__)
    if isinstance(target, types.FunctionType):
        return _renamed(target)

    def forward(*args):
        return fn(*args)

    with contextlib.suppress(TypeError, ValueError):
        forward.__signature__ = inspect.signature(fn)
    return forward


def _takes_only_star_args(module: torch.nn.Module) -> bool:
    """Whether ``module.forward`` is ``forward(*args)``: a function without a signature Python can
    read (a builtin such as ``F.linear``)."""
    try:
        parameters = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return False
    return [p.kind for p in parameters] == [inspect.Parameter.VAR_POSITIONAL]


def _renamed(fn: types.FunctionType) -> types.FunctionType:
    renamed = types.FunctionType(fn.__code__.replace(co_name="forward"), fn.__globals__, "forward",
                                 fn.__defaults__, fn.__closure__)
    renamed.__kwdefaults__ = fn.__kwdefaults__
    return renamed


def capture(program: Callable | torch.nn.Module, example_inputs: Sequence[Any],
            keep: Sequence[str] = DEFAULT_KEEP, fold: bool = True,
            example_kwargs: Mapping[str, Any] | None = None, dynamic_shapes: Any = None) -> Captured:
    """Export ``program`` for ``example_inputs`` (and ``example_kwargs``) and write it as Torch IR,
    keeping the ops in ``keep`` whole.

    With ``fold``, what depends only on shapes and constants is computed here and
    enters the graph as ``constant`` inputs. ``dynamic_shapes`` (as ``torch.export.export``
    takes it: ``torch.export.Dim`` per dynamic axis) makes those sizes symbols (``s0``, ...).
    """
    example_inputs = tuple(example_inputs)
    example_kwargs = sorted_keywords(example_kwargs or {})
    check_argument_kinds(flatten_call(example_inputs, example_kwargs)[0], "example input")
    register_library_containers()
    module = program if isinstance(program, torch.nn.Module) else _FunctionModule(program)
    if _takes_only_star_args(module) and isinstance(dynamic_shapes, (tuple, list)):
        dynamic_shapes = (tuple(dynamic_shapes),)  # export sees one argument, the tuple of them all
    table = _decomposition_table(keep)
    with returning_leaves(module) as output_structure:
        exported = _export(module, example_inputs, example_kwargs, dynamic_shapes)
    try:
        with _quiet():
            exported = rewritten(exported, table, frozenset(keep)) or exported.run_decompositions(table)
    except Exception as error:
        raise LaminaError(f"lowering the exported program to core ATen failed: {_reason(error)}") from error
    with naming(exported.graph_module) as names:
        captured = _build(exported, fold_constants(exported) if fold else Folding({}, frozenset()), module)
    return attrs.evolve(captured, output_structure=output_structure(), size_ranges=_size_ranges(exported, names))


def _size_ranges(exported, names: Mapping) -> dict[str, tuple[int, int | None]]:
    """Each symbol's range, as the exported program's range constraints give it."""
    found = {}
    for sym, symbol in names.items():
        bounds = exported.range_constraints.get(sym)
        if bounds is not None and isinstance(symbol, ex.Var):  # not a symbol taken as another size
            # an unbounded axis reaches sympy's infinity (or PyTorch's integer one)
            upper = int(bounds.upper) if isinstance(bounds.upper, sympy.Integer) else None
            found[symbol.name] = (int(bounds.lower), upper)
    return found


def check_argument_kinds(leaves: Sequence[Any], what: str) -> None:
    """Every leaf of a call's arguments is a tensor or a Python number (None leaves no leaf)."""
    for position, value in enumerate(leaves):
        if not isinstance(value, (torch.Tensor, bool, int, float)):
            raise LaminaError(
                f"{what} {position} is a {type(value).__name__}; lamina programs take tensors and Python "
                "numbers as arguments, in tuples, lists and dicts of them"
            )


_NOISY_LOGGERS = ("torch._subclasses.fake_tensor", "torch.export", "torch._dynamo")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence what PyTorch logs about a failed trace (lamina reports it) and its
    deprecation notices about its own internals, which users cannot act on."""
    loggers = [logging.getLogger(name) for name in _NOISY_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _decomposition_table(keep: Sequence[str]):
    table = torch.export.default_decompositions()
    by_name = {str(op): op for op in table.keys()}
    for name in keep:
        if name in by_name:
            table.pop(by_name[name])
        elif not _is_aten_op(name):
            raise LaminaError(
                f"the keep-list names {name!r}, which is not an ATen op; "
                "write ops as Torch IR prints them, like 'aten.linear.default'"
            )
    return table


def _is_aten_op(name: str) -> bool:
    namespace, _, rest = name.partition(".")
    packet, _, overload = rest.partition(".")
    try:
        getattr(getattr(getattr(torch.ops, namespace), packet), overload)
    except (AttributeError, RuntimeError):
        return False
    return bool(overload)


def _export(module: torch.nn.Module, example_inputs: tuple, example_kwargs: dict, dynamic_shapes: Any = None):
    try:
        with _quiet():
            return torch.export.export(module, example_inputs, example_kwargs, dynamic_shapes=dynamic_shapes)
    except Exception as error:
        raise LaminaError(
            f"torch.export could not capture the program: {_reason(error)}\n"
            "lamina compiles what torch.export can trace: tensor code without data-dependent "
            "Python control flow. Run the program eagerly with the same inputs to check it."
        ) from error


def _reason(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = lines[0] if lines else ""
    return f"{type(error).__name__}: {text[:300]}"


_SIZE_ASSERTIONS = (torch.ops.aten._assert_scalar.default, torch.ops.aten.sym_constrain_range_for_size.default)
"""What export adds to a program of dynamic sizes to check their declared ranges."""


def _build(exported, folding: Folding, module: torch.nn.Module) -> Captured:
    signature = exported.graph_signature
    specs = {spec.arg.name: spec for spec in signature.input_specs}
    inputs, positions, constants, state = [], [], {}, {}
    user_positions: dict[str, int] = {}
    nodes, defined = [], set()
    taken = {fx_node.name for fx_node in exported.graph.nodes}
    user_position = 0
    for fx_node in exported.graph.nodes:
        if fx_node.name in folding.dropped:
            continue
        if fx_node.name in folding.triangles:
            nodes += _triangle_nodes(fx_node, folding.triangles[fx_node.name], taken)
            defined.add(fx_node.name)
        elif fx_node.name in folding.inputs:
            inputs.append(torch_ir.Input(fx_node.name, _tensor_type(fx_node), "constant"))
            positions.append(None)
            constants[fx_node.name] = folding.inputs[fx_node.name]
            defined.add(fx_node.name)
        elif fx_node.op == "placeholder":
            spec = specs[fx_node.name]
            if spec.kind == InputKind.USER_INPUT:
                user_position += 1
                if not isinstance(fx_node.meta.get("val"), torch.Tensor):
                    continue  # a Python number: export specialised the graph to its value
                kind, position = "user", user_position - 1
                user_positions[fx_node.name] = position
            elif spec.kind in _INPUT_KINDS:
                kind, position = _INPUT_KINDS[spec.kind], None
                if kind == "constant":
                    constants[fx_node.name] = _state(exported, spec.target)
                else:
                    state[fx_node.name] = tuple(spec.target.split("."))
            else:
                raise LaminaError(f"the program takes a {spec.kind.name.lower()} input ({fx_node.name}), "
                                  "which lamina does not support")
            inputs.append(torch_ir.Input(fx_node.name, _tensor_type(fx_node), kind))
            positions.append(position)
            defined.add(fx_node.name)
        elif fx_node.op == "call_function" and isinstance(fx_node.meta.get("val"), SYMBOLIC_NUMBERS):
            continue  # a number computed from sizes: the nodes that use it hold its expression
        elif fx_node.op == "call_function" and fx_node.target in _SIZE_ASSERTIONS:
            continue  # the ranges of dynamic sizes, which a call checks (``Specialization.takes``)
        elif fx_node.op == "call_function":
            nodes.append(_node(fx_node, folding.aliases))
            defined.add(fx_node.name)
        elif fx_node.op == "output":
            returned = _outputs(fx_node, signature, defined | set(folding.aliases))
            outputs = [folding.aliases.get(node.name, node.name) for node in returned]
            sources = _output_sources(returned, outputs, specs, user_positions, module)
        else:
            raise LaminaError(f"the exported program has a {fx_node.op} node ({fx_node.name}): "
                              "control flow and submodule calls are not supported")
    graph = torch_ir.Graph(inputs, nodes, outputs)
    torch_ir.verify_graph(graph)
    folded_from = tuple(_folded_from(exported, module, state))
    return Captured(graph, positions, CapturedTensors(constants, state, module), state=state,
                    folded_from=folded_from, output_sources=tuple(sources), module=module)


def _output_sources(returned: list, outputs: list[str], specs: Mapping, user_positions: Mapping[str, int],
                    module: torch.nn.Module) -> list[Source]:
    """Where each returned value comes from: an input, module state or another output returned as
    it is or as a view of it, else the graph's output (``outputs``: the graph's outputs, one per
    returned value). The graph still computes every output, so that its Torch IR is the program's
    whole; a call returns the aliases in place of the copies."""
    sources: list[Source] = []
    for node, name in zip(returned, outputs):
        root, steps = view_chain(node)
        base = _aliased(root, specs, user_positions, module)
        if base is None and steps and any(other is root for other in returned):
            base = Computed(outputs.index(outputs[returned.index(root)]))
        if base is None:
            sources.append(Computed(outputs.index(name)))
        else:
            sources.append(View(base, steps) if steps else base)
    return sources


def _aliased(fx_node, specs: Mapping, user_positions: Mapping[str, int], module: torch.nn.Module):
    """The input or module tensor that eager would return for ``fx_node``, or None."""
    if fx_node.op != "placeholder":
        return None
    if fx_node.name in user_positions:
        return Argument(user_positions[fx_node.name])
    spec = specs[fx_node.name]
    if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
        path = tuple(spec.target.split("."))
        if isinstance(lookup(module, path), torch.Tensor):
            return State(path)
    return None


def _folded_from(exported, module: torch.nn.Module, state: Mapping[str, Path]) -> Iterator[FoldedFrom]:
    """Every tensor that the program holds as its value at capture rather than reading it at each call."""
    for spec in exported.graph_signature.input_specs:
        if spec.arg.name in state or not (spec.kind == InputKind.CONSTANT_TENSOR
                                          or (spec.kind == InputKind.BUFFER and not spec.persistent)):
            continue
        tensor = _state(exported, spec.target)
        if isinstance(tensor, torch.Tensor):
            path = tuple(spec.target.split("."))
            yield FoldedFrom(tensor, path if lookup(module, path) is tensor else None)


def _triangle_nodes(fx_node, triangle: Triangle, taken: set[str]) -> list[torch_ir.Node]:
    """Nodes that compute a folded mask that is a triangle from coordinates, the last one
    named as the folded node: ``ones``, then ``triu`` or ``tril``, then ``expand``."""
    source = source_location(fx_node.meta.get("stack_trace"))
    square = triangle.shape[-2:]

    def fresh(role: str) -> str:
        name, n = f"{fx_node.name}_{role}", 1
        while name in taken:
            name, n = f"{fx_node.name}_{role}_{n}", n + 1
        taken.add(name)
        return name

    def bools(shape) -> torch_ir.TensorType:
        return torch_ir.TensorType(tuple(shape), dtypes.bool_)

    ones = torch_ir.Node(fresh("ones"), "aten.ones.default", (square,), (("dtype", dtypes.bool_),),
                         bools(square), source)
    side = "aten.triu.default" if triangle.upper else "aten.tril.default"
    expanded = len(triangle.shape) > 2
    cut = torch_ir.Node(fresh("triangle") if expanded else fx_node.name, side,
                        (torch_ir.Ref(ones.name), triangle.diagonal), (), bools(square), source)
    if not expanded:
        return [ones, cut]
    return [ones, cut, torch_ir.Node(fx_node.name, "aten.expand.default", (torch_ir.Ref(cut.name), triangle.shape), (),
                                     bools(triangle.shape), source)]


def _state(exported, target: str) -> torch.Tensor:
    if target in exported.state_dict:
        return exported.state_dict[target]
    return exported.constants[target]


def _outputs(fx_node, signature, defined: set[str]) -> list:
    outputs = []
    for value, spec in zip(fx_node.args[0], signature.output_specs):
        if spec.kind != OutputKind.USER_OUTPUT:
            raise LaminaError(
                f"the program updates {spec.target or 'an input'} in place ({spec.kind.name.lower()}); "
                "lamina compiles pure functions: return the new value instead"
            )
        if not isinstance(value, torch.fx.Node) or value.name not in defined:
            raise LaminaError(f"the program returns {value!r}; lamina programs return tensors")
        outputs.append(value)
    return outputs


def _where(fx_node) -> str:
    source = source_location(fx_node.meta.get("stack_trace"))
    return f"{fx_node.name}" + (f" at {source}" if source else "")


def _dtype(dtype: torch.dtype, fx_node) -> dtypes.DType:
    name = str(dtype).removeprefix("torch.")
    if name not in dtypes.BY_NAME:
        known = ", ".join(dtypes.BY_NAME)
        raise LaminaError(f"{_where(fx_node)} uses dtype {name}; lamina supports {known}")
    return dtypes.BY_NAME[name]


def _tensor_type(fx_node) -> torch_ir.TensorType | None:
    value = fx_node.meta.get("val")
    if isinstance(value, (list, tuple)):
        for item in value:
            if isinstance(item, torch.Tensor):
                _shape(item, fx_node)
        return None
    if not isinstance(value, torch.Tensor):
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            raise LaminaError(f"{_where(fx_node)} computes a size from tensor data ({value}); "
                              "lamina compiles programs whose shapes are known when they are captured")
        return None
    return torch_ir.TensorType(_shape(value, fx_node), _dtype(value.dtype, fx_node))


def _shape(value: torch.Tensor, fx_node) -> tuple[Size, ...]:
    shape = tuple(value.shape)
    if reading_symbols():
        return tuple(size_of(size, _where(fx_node)) for size in shape)
    if not all(isinstance(size, int) for size in shape):
        raise LaminaError(
            f"{_where(fx_node)} produces a tensor of symbolic shape {list(shape)}: its size depends on "
            "tensor data or on dynamic dimensions. lamina compiles programs whose shapes are known when "
            "they are captured"
        )
    return shape


def _result_type(value: Any, fx_node) -> torch_ir.TensorType | None:
    """One result of an op with several; None for one lamina cannot hold (a random-number
    state of uint64), which is an error only where a node reads it."""
    if not isinstance(value, torch.Tensor) or str(value.dtype).removeprefix("torch.") not in dtypes.BY_NAME:
        return None
    return torch_ir.TensorType(_shape(value, fx_node), _dtype(value.dtype, fx_node))


_NO_ALIASES: Mapping[str, str] = types.MappingProxyType({})


def _node(fx_node, aliases: Mapping[str, str] = _NO_ALIASES) -> torch_ir.Node:
    target = fx_node.target
    name = str(target) if isinstance(target, torch._ops.OpOverload) else getattr(target, "__name__", str(target))
    args = tuple(_argument(a, fx_node, aliases) for a in fx_node.args)
    kwargs = tuple((k, _argument(v, fx_node, aliases)) for k, v in fx_node.kwargs.items()
                   if k not in _ALLOCATION_KWARGS)
    if target is torch.ops.aten.as_strided.default:
        kwargs += _eager_layout(fx_node.args[0])
    value = fx_node.meta.get("val")
    results = ()
    if isinstance(value, (list, tuple)):
        results = tuple(_result_type(v, fx_node) for v in value)
    return torch_ir.Node(
        name=fx_node.name,
        target=name,
        args=args,
        kwargs=kwargs,
        type=_tensor_type(fx_node),
        source=source_location(fx_node.meta.get("stack_trace")),
        results=results,
    )


def _eager_layout(fx_node) -> tuple[tuple[str, Any], ...]:
    """What ``as_strided`` needs to know of its input besides its values: the strides and storage
    offset it had in eager, where they are numbers (``as_strided`` reads the storage)."""
    value = fx_node.meta.get("val") if isinstance(fx_node, torch.fx.Node) else None
    if not isinstance(value, torch.Tensor) or not all(isinstance(s, int) for s in value.stride()) \
            or not isinstance(value.storage_offset(), int):
        return ()
    return (("input_strides", tuple(value.stride())), ("input_storage_offset", value.storage_offset()))


def _argument(value: Any, fx_node, aliases: Mapping[str, str] = _NO_ALIASES) -> Any:
    if isinstance(value, torch.fx.Node) and isinstance(value.meta.get("val"), SYMBOLIC_NUMBERS):
        return size_of(value.meta["val"], _where(fx_node))
    if isinstance(value, SYMBOLIC_NUMBERS):
        return size_of(value, _where(fx_node))
    if isinstance(value, torch.fx.Node):
        return torch_ir.Ref(aliases.get(value.name, value.name))
    if isinstance(value, (list, tuple)):
        return tuple(_argument(v, fx_node, aliases) for v in value)
    if isinstance(value, torch.dtype):
        return _dtype(value, fx_node)
    if isinstance(value, (torch.device, torch.layout, torch.memory_format)):
        return str(value).removeprefix("torch.")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise LaminaError(f"{_where(fx_node)} has an argument lamina cannot represent: {value!r}")

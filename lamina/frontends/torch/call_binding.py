"""How one call meets a captured program: the module state it reads now, and what it returns.

A compiled function must answer as the eager program would at the moment it is called,
not as it did when it was captured:

- parameters and buffers are looked up in the module at each call, by their path
  (``layers.0.attn.weight``), so that a weight replaced (``lin.weight = nn.Parameter(...)``,
  ``load_state_dict(..., assign=True)``), reassigned (``lin.weight.data = ...``) or updated in
  place (an optimizer step) is the one the kernels read. A replacement of another shape or
  dtype makes the program stale: it is captured and compiled again;
- what was folded at capture (``folding``) was computed from tensors a user can still change:
  non-persistent buffers and tensors lifted from the program's code or attributes. Each is
  remembered with its identity, storage and version counter (``Tensor._version``, which every
  in-place write moves) and a copy of its value; when its value changed, the program is stale
  and is folded and compiled again;
- an output that eager returns as an input, a parameter or another output (``return x``,
  ``return y, y``) is that same object, and one that eager returns as a view of them
  (``x.transpose(0, 1)``, ``x[1:]``, ``y.view(-1)``) is that view, made at call time by the
  same view ops. ``lamina.compile``'s graph still computes those outputs (its Torch IR stays the
  program's whole); the FX graphs of ``torch.compile`` leave them out.

The checks cost a few dictionary lookups per parameter, which is all a call adds.
"""

from __future__ import annotations

import functools
import operator
from typing import Any, Callable, Iterator, Mapping, Sequence

import attrs
import torch

from lamina.core.errors import LaminaError


class StaleCapture(LaminaError):
    """Module state that the captured program depends on changed in a way it cannot take as it is."""


class InferenceOnlyError(LaminaError):
    """A gradient was asked of a program compiled by ``lamina.compile``."""


Path = tuple[str, ...]


def submodule(module: torch.nn.Module | None, names: Sequence[str]) -> torch.nn.Module | None:
    """The submodule at ``names`` under ``module`` as it is now, or None where there is none."""
    for name in names:
        module = module._modules.get(name) if isinstance(module, torch.nn.Module) else None
    return module if isinstance(module, torch.nn.Module) else None


def lookup(module: torch.nn.Module | None, path: Path) -> Any:
    """The attribute at ``path`` under ``module`` as it is now (a parameter, a buffer, a plain
    tensor), or None where there is none. It reads the module's own dictionaries, which is
    what ``getattr`` finds, without the cost of ``nn.Module.__getattr__``."""
    owner = submodule(module, path[:-1])
    if owner is None:
        return None
    leaf = path[-1]
    for table in (owner._parameters, owner._buffers, owner.__dict__):
        if leaf in table:
            return table[leaf]
    return None


class FoldedFrom:
    """A tensor whose value the program holds as it was at capture (folded, or passed as a
    constant); ``path`` is where the module holds it, None where nothing but the program does
    (a tensor lifted from a closure or created in the program's code).

    The check on each call compares the tensor's identity, storage and version counter with
    those at capture (``Tensor._version`` moves with every in-place write; ``.data =`` swaps the
    storage without moving it). Where one moved, the value is compared with a copy kept at
    capture, so that a round trip that restores it (a cast to float64 and back for an eager
    reference) costs one comparison rather than a new capture.
    """

    def __init__(self, tensor: torch.Tensor, path: Path | None = None):
        self.path = path
        self._value = tensor.detach().clone()
        self._seen(tensor)

    def _seen(self, tensor: torch.Tensor) -> None:
        self._tensor = tensor
        self._fingerprint = _fingerprint(tensor)

    def changed(self, module: torch.nn.Module | None) -> str | None:
        """What changed since capture, in words, or None."""
        current = self._tensor if self.path is None else lookup(module, self.path)
        if current is self._tensor and _fingerprint(current) == self._fingerprint:
            return None
        value = self._value
        if (isinstance(current, torch.Tensor) and current.shape == value.shape and current.dtype == value.dtype
                and current.device == value.device and torch.equal(current, value)):
            self._seen(current)
            return None
        return f"{'.'.join(self.path) if self.path else 'a tensor the program holds as a constant'} changed"


def _fingerprint(tensor: torch.Tensor) -> tuple:
    return tensor.data_ptr(), tensor._version, tensor.dtype, tensor.shape


@attrs.frozen
class Computed:
    """Output ``index`` of the compiled program."""

    index: int


@attrs.frozen
class Argument:
    """The call's argument at ``position`` (among the flattened leaves), returned as it is."""

    position: int


@attrs.frozen
class State:
    """The module's tensor at ``path``, as it is at the call, returned as it is."""

    path: Path


@attrs.frozen(eq=False)
class View:
    """A view of ``base`` made by eager PyTorch's view ops, each ``(op, args, kwargs, item)`` with
    the viewed tensor as its first argument (``item``: which of several tensors it returns)."""

    base: Computed | Argument | State
    steps: tuple[tuple[Any, tuple, Mapping[str, Any], int | None], ...]


Source = Computed | Argument | State | View


def is_view_op(target: Any) -> bool:
    """An ATen op that returns one tensor, or a list of them, sharing its first argument's memory."""
    if not isinstance(target, torch._ops.OpOverload) or not target.is_view:
        return False
    returns = target._schema.returns
    return len(returns) == 1 and (isinstance(returns[0].type, torch.TensorType)
                                  or returns[0].type == torch.ListType(torch.TensorType.get()))


def view_chain(fx_node) -> tuple[Any, tuple]:
    """The FX node that ``fx_node`` is a view of through view ops alone, and those ops in the
    order they apply (none: ``fx_node`` itself). A step is ``(op, args, kwargs, item)``:
    ``item`` picks one tensor of an op that returns several (``split``, ``unbind``), else None."""
    steps = []
    while True:
        source, item = fx_node, None
        if (fx_node.op == "call_function" and fx_node.target is operator.getitem
                and isinstance(fx_node.args[0], torch.fx.Node) and isinstance(fx_node.args[1], int)):
            source, item = fx_node.args[0], fx_node.args[1]
        if not _views_its_first_argument(source, several=item is not None):
            break
        steps.append((source.target, tuple(source.args[1:]), dict(source.kwargs), item))
        fx_node = source.args[0]
    return fx_node, tuple(reversed(steps))


def _views_its_first_argument(fx_node, several: bool) -> bool:
    return (fx_node.op == "call_function" and is_view_op(fx_node.target) and bool(fx_node.args)
            and isinstance(fx_node.args[0], torch.fx.Node)
            and not _reads_tensors((fx_node.args[1:], fx_node.kwargs))
            and several == isinstance(fx_node.meta.get("val"), (list, tuple)))


def _reads_tensors(values) -> bool:
    found = []
    torch.fx.node.map_arg(values, found.append)
    return bool(found)


def output_value(source: Source, leaves: Sequence[Any], computed: Sequence[torch.Tensor],
                 module: torch.nn.Module | None = None) -> torch.Tensor:
    """The tensor ``source`` names for one call: a computed output, an argument, module state, or a view of one."""
    if isinstance(source, Computed):
        return computed[source.index]
    if isinstance(source, Argument):
        return leaves[source.position]
    if isinstance(source, State):
        return lookup(module, source.path)
    value = output_value(source.base, leaves, computed, module)
    for op, args, kwargs, item in source.steps:
        value = op(value, *args, **kwargs)
        if item is not None:
            value = value[item]
    return value


class CapturedTensors(Mapping[str, torch.Tensor]):
    """The tensors a captured program reads beside the call's arguments, by graph input name:
    module state as the module holds it now, folded constants as they were folded."""

    def __init__(self, constants: Mapping[str, torch.Tensor], state: Mapping[str, Path],
                 module: torch.nn.Module | None):
        self._constants = dict(constants)
        self._state = dict(state)
        self._module = module

    def for_module(self, module: torch.nn.Module | None) -> "CapturedTensors":
        """The same tensors, module state read from ``module`` (None: from no module, as a kept capture
        is stored)."""
        return CapturedTensors(self._constants, self._state, module)

    def __getitem__(self, name: str) -> torch.Tensor:
        if name in self._state:
            value = lookup(self._module, self._state[name])
            if not isinstance(value, torch.Tensor):
                raise StaleCapture(f"the module has no tensor {'.'.join(self._state[name])} any more")
            return value
        return self._constants[name]

    def __iter__(self) -> Iterator[str]:
        yield from self._constants
        yield from self._state

    def __len__(self) -> int:
        return len(self._constants) + len(self._state)


_submodule_assignments = [0]
"""How many times a submodule was assigned anywhere (counted by a global registration hook):
where it has not moved since a binding found the modules holding its tensors, they still do."""


def _count_submodule_assignment(module, name, submodule) -> None:
    """Counts, except while Dynamo traces the assignment: the count it would read and guard on
    then changes with every call of code that assigns a submodule (a generation step), and
    every call would compile again; Dynamo's compiled code makes the assignment itself when
    it runs, and this hook counts it then."""
    if torch.compiler.is_compiling():
        return
    _submodule_assignments[0] += 1


@functools.cache
def _watch_submodule_assignments() -> None:
    torch.nn.modules.module.register_module_module_registration_hook(_count_submodule_assignment)


@attrs.frozen(eq=False)
class _StateFeed:
    """Graph input ``index``: the module's tensor at ``path``, of ``shape`` and ``dtype``."""

    index: int
    path: Path
    shape: torch.Size
    dtype: torch.dtype


class CallBinding:
    """Gathers a captured program's inputs for one call, and assembles what it returns.

    ``graph_inputs`` are the program's inputs (their ``name`` and ``type``), in order. Each
    module tensor is read from the dictionary of the module that holds it (``_parameters``,
    ``_buffers``); those modules are found again, along the paths, only after a submodule
    was assigned somewhere, so that a call costs a dictionary lookup and a shape check per
    tensor.
    """

    def __init__(self, captured, graph_inputs: Sequence[Any]):
        self._module = captured.module
        self._folded_from = tuple(captured.folded_from)
        self._template: list[Any] = []
        self._user: list[tuple[int, int]] = []
        self._state: list[_StateFeed] = []
        for index, (position, graph_input) in enumerate(zip(captured.user_input_positions, graph_inputs)):
            self._template.append(None)
            if position is not None:
                self._user.append((index, position))
            elif graph_input.name in captured.state:
                self._state.append(_StateFeed(index, captured.state[graph_input.name],
                                              torch.Size(graph_input.type.shape),
                                              getattr(torch, graph_input.type.dtype.name)))
            else:
                self._template[index] = captured.constants[graph_input.name]
        state = {feed.index for feed in self._state}
        self._not_state = [index for index in range(len(self._template)) if index not in state]
        self._tables: list[tuple[int, dict, str, torch.Size, torch.dtype]] = []
        self._found_after = -1
        if self._state:
            _watch_submodule_assignments()
        sources = captured.output_sources
        self._sources = None if sources is None or sources == tuple(Computed(i) for i in range(len(sources))) \
            else tuple(sources)

    def _find_tables(self) -> None:
        self._found_after = _submodule_assignments[0]
        tables = []
        for feed in self._state:
            owner = submodule(self._module, feed.path[:-1])
            leaf = feed.path[-1]
            table = {}
            if owner is not None:
                table = owner._parameters if leaf in owner._parameters else owner._buffers
            tables.append((feed.index, table, leaf, feed.shape, feed.dtype))
        self._tables = tables

    def inputs(self, leaves: Sequence[Any]) -> list[torch.Tensor]:
        """Each graph input's tensor for a call with ``leaves``; StaleCapture where the module's
        state no longer fits the program."""
        for folded in self._folded_from:
            change = folded.changed(self._module)
            if change is not None:
                raise StaleCapture(f"{change} after the program was captured")
        inputs = list(self._template)
        for index, position in self._user:
            inputs[index] = leaves[position]
        if self._found_after != _submodule_assignments[0]:
            self._find_tables()
        for index, table, leaf, shape, dtype in self._tables:
            tensor = table.get(leaf)
            if tensor is None or tensor.shape != shape or tensor.dtype != dtype:
                tensor = self._moved(index)
            inputs[index] = tensor
        return inputs

    def _moved(self, index: int) -> torch.Tensor:
        """The module tensor of graph input ``index`` where it is no longer where it was, or no
        longer of its shape and dtype (StaleCapture)."""
        feed = next(feed for feed in self._state if feed.index == index)
        value = lookup(self._module, feed.path)
        name = ".".join(feed.path)
        if not isinstance(value, torch.Tensor):
            raise StaleCapture(f"{name} is no longer a tensor of the module")
        if value.shape != feed.shape or value.dtype != feed.dtype:
            raise StaleCapture(f"{name} is now {value.dtype}{list(value.shape)}, "
                               f"the program was captured for {feed.dtype}{list(feed.shape)}")
        self._find_tables()
        return value

    def requiring_grad(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The tensors a call's outputs hang from in autograd's graph (``run_in_autograd``): in grad
        mode, every input that requires grad but module state, and the first module tensor that does.

        Not all of a model's parameters: attaching hundreds costs a call more than its kernels'
        launches. ``loss.backward()`` reaches the error all the same; ``torch.autograd.grad``
        asked of other parameters alone gets PyTorch's word that they were not used."""
        if not torch.is_grad_enabled():
            return []
        found = [inputs[index] for index in self._not_state if inputs[index].requires_grad]
        first = next((inputs[feed.index] for feed in self._state if inputs[feed.index].requires_grad), None)
        return found if first is None else [*found, first]

    def outputs(self, leaves: Sequence[Any], computed: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """What the program returns, flat, from the compiled program's ``computed`` outputs."""
        if self._sources is None:
            return list(computed)
        return [output_value(source, leaves, computed, self._module) for source in self._sources]


class _NoBackward(torch.autograd.Function):
    """The outputs of a compiled program, in the graph of the tensors they were computed from,
    with a backward that says what to use instead."""

    @staticmethod
    def forward(ctx, run: Callable[[], list[torch.Tensor]], *requiring_grad: torch.Tensor):
        outputs = run()
        ctx.mark_non_differentiable(*(o for o in outputs if not (o.is_floating_point() or o.is_complex())))
        return tuple(outputs)

    @staticmethod
    def backward(ctx, *grads):
        raise InferenceOnlyError(
            "lamina.compile compiles inference only: it has no backward graph, so the gradients that "
            "backward() asked for cannot be computed. To train, use torch.compile(model, backend=\"lamina\"), "
            "which compiles the forward and backward graphs; for inference, call the compiled function "
            "under torch.no_grad() or torch.inference_mode()."
        )


def run_in_autograd(run: Callable[[], list[torch.Tensor]], requiring_grad: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """``run()``'s outputs: as they come where no gradient can be asked of them (none of the
    tensors they are computed from requires grad, or grad mode is off), else attached to
    ``requiring_grad``, so that eager code around them sees outputs that require grad as it
    would, and a ``backward()`` through them raises ``InferenceOnlyError``."""
    if not requiring_grad:
        return run()
    return list(_NoBackward.apply(run, *requiring_grad))

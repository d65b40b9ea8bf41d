"""The eager fallback of ``torch.compile(..., options={"fallback": "eager"})``: a graph split into the
parts lamina supports, which it compiles, and the rest, which runs in PyTorch.

An op is lamina's where a plugin decomposes it and every tensor it reads and makes is of a dtype
lamina computes (complex numbers are not). lamina's outputs are laid out row-major, where eager
lays some out otherwise (a transpose's product); PyTorch ops that read a tensor by its strides
(``as_strided`` of a tensor that eager lays out with gaps, and the views that lead to it) run in
PyTorch on eager's layout: the views run there too, and the outputs of lamina's parts they read
are laid out as eager laid them out.
"""

from __future__ import annotations

import operator
import warnings
from typing import Any, Callable, Sequence

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from lamina.api import Compiler
from lamina.core.errors import LaminaError
from lamina.core.ir import dtypes
from lamina.core.ir.shapes import dense_order, reads_within
from lamina.frontends.torch.capture import _where
from lamina.frontends.torch.fx_graph import is_write_to_argument

EAGER_FALLBACK_REMEDY = ("Or run them in PyTorch and the rest in lamina: "
                         "torch.compile(model, backend=\"lamina\", options={\"fallback\": \"eager\"}).")


def _op_name(node: torch.fx.Node) -> str:
    target = node.target
    return str(target) if isinstance(target, torch._ops.OpOverload) else getattr(target, "__name__", str(target))


class LaminaSupport(OperatorSupportBase):
    """An op is supported when a registered plugin decomposes it and every tensor it reads and makes is
    of a dtype lamina computes (not a complex rotation's, Llama-4's); ``getitem`` when what it reads is."""

    def __init__(self, compiler: Compiler):
        self.ops = set(compiler.plugins.registry.names("op"))

    def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:
        if node.op != "call_function":
            return False
        if node.target is operator.getitem:
            return isinstance(node.args[0], torch.fx.Node) and self.is_node_supported(submodules, node.args[0])
        if _uncomputed_dtypes(node):
            return False
        if _reads_storage(node):
            return False
        return _op_name(node) in self.ops or is_write_to_argument(node)


def _lamina_takes_as_strided(node: torch.fx.Node) -> bool:
    """Whether lamina computes the ``as_strided`` ``node``: its input laid out densely by eager, with sizes
    and strides that are numbers, and the view reading none of the storage around it
    (``views.decompose_as_strided``)."""
    source = node.args[0]
    value = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
    if not isinstance(value, torch.Tensor) or _dense_order(value) is None:
        return False
    size, stride = node.args[1], node.args[2]
    offset = node.args[3] if len(node.args) > 3 and node.args[3] is not None else value.storage_offset()
    numbers = (*value.shape, *value.stride(), *size, *stride, offset, value.storage_offset())
    return all(isinstance(n, int) for n in numbers) \
        and reads_within(value.numel(), size, stride, offset - value.storage_offset())


def check_dtypes(graph_module: torch.fx.GraphModule) -> None:
    """A ``LaminaError`` naming the ops (and their source lines) that read or make tensors of dtypes
    lamina does not compute (complex numbers), with what the user can do."""
    found = [(node, _uncomputed_dtypes(node)) for node in graph_module.graph.nodes if node.op == "call_function"]
    found = [(node, names) for node, names in found if names]
    if found:
        lines = [f"  {_op_name(node)} ({', '.join(sorted(names))})  {_where(node)}" for node, names in found[:8]]
        more = [f"  and {len(found) - 8} more"] if len(found) > 8 else []
        raise LaminaError("lamina does not compute tensors of these ops' dtypes:\n" + "\n".join(lines + more)
                          + "\n" + EAGER_FALLBACK_REMEDY)


def _uncomputed_dtypes(node: torch.fx.Node) -> set[str]:
    """The dtypes of the tensors that ``node`` reads and makes that lamina does not compute."""
    found = set()
    for n in (node, *node.all_input_nodes):
        value = n.meta.get("val")
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(v, torch.Tensor) and str(v.dtype).removeprefix("torch.") not in dtypes.BY_NAME:
                found.add(str(v.dtype).removeprefix("torch."))
    return found


class _CompiledPart(torch.nn.Module):
    """A partition that lamina compiled, standing where the partitioner put its submodule.

    lamina's outputs are laid out row-major; an output that PyTorch reads by its strides (``as_strided``
    of a tensor eager lays out with gaps, through the views that make them) is laid out as eager laid it
    out (``laid_out``: the order of the axes in memory, per output, or None)."""

    def __init__(self, runner: Callable, laid_out: Sequence[tuple[int, ...] | None] = ()):
        super().__init__()
        self.runner = runner
        self.laid_out = tuple(laid_out)

    def forward(self, *args: Any):
        outputs = self.runner(*args)
        if any(self.laid_out):
            outputs = tuple(_in_order(out, order) if order is not None else out
                            for out, order in zip(outputs, self.laid_out))
        return outputs[0] if len(outputs) == 1 else outputs


STORAGE_READERS = {torch.ops.aten.as_strided.default, torch.ops.aten.as_strided_scatter.default}
"""PyTorch ops whose result depends on the strides of their input, not only on its values."""


def _reads_storage(node: torch.fx.Node) -> bool:
    """Whether ``node`` reads its input by strides in PyTorch: a ``STORAGE_READERS`` op that lamina does
    not take (lamina's ``as_strided`` takes an input that eager lays out without gaps, by strides that
    are numbers), or a view that one reads."""
    if node.target is torch.ops.aten.as_strided.default:
        return not _lamina_takes_as_strided(node)
    if node.target in STORAGE_READERS:
        return True
    is_view = isinstance(node.target, torch._ops.OpOverload) and node.target.is_view
    return is_view and any(_reads_storage(user) for user in node.users)


def _storage_layouts(part: torch.fx.GraphModule, node: torch.fx.Node) -> list[tuple[int, ...] | None]:
    """For each output of the partition ``part``, called at ``node``: where PyTorch reads it by strides
    (``_reads_storage``), the order of its axes in memory as eager lays it out (innermost first), where
    that layout is dense."""
    returned = next(n for n in part.graph.nodes if n.op == "output").args[0]
    returned = list(returned) if isinstance(returned, (tuple, list)) else [returned]
    read = set()
    for user in node.users:
        if user.target is operator.getitem:
            if any(_reads_storage(u) for u in user.users):
                read.add(user.args[1])
        elif _reads_storage(user):
            read.add(0)
    return [_dense_order(value.meta.get("val")) if i in read and isinstance(value, torch.fx.Node) else None
            for i, value in enumerate(returned)]


def _dense_order(value: Any) -> tuple[int, ...] | None:
    """The axes of ``value`` (a fake tensor) from innermost to outermost in memory, where its elements
    are dense in that order; else None."""
    if not isinstance(value, torch.Tensor):
        return None
    return dense_order([_hint(s) for s in value.shape], [_hint(s) for s in value.stride()])


def _hint(size) -> int:
    return size.node.hint if isinstance(size, torch.SymInt) else int(size)


def _in_order(t: torch.Tensor, order: tuple[int, ...]) -> torch.Tensor:
    """``t``'s values with its axes in memory in ``order`` (innermost first)."""
    outer_first = list(reversed(order))
    inverse = sorted(range(len(order)), key=outer_first.__getitem__)
    return t.permute(outer_first).contiguous().permute(inverse)


def with_eager_fallback(graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any], compiler: Compiler,
                        runner: Callable[[Compiler, torch.fx.GraphModule, Sequence[Any]], Callable]):
    """``graph_module`` as ``runner`` compiles it where lamina supports every op; else split into the
    parts lamina supports, each compiled by ``runner``, and the rest, which runs in PyTorch, with a
    warning that names the ops that ran there."""
    support = LaminaSupport(compiler)
    eager = sorted({_op_name(n) + "".join(f" ({name})" for name in sorted(_uncomputed_dtypes(n)))
                    for n in graph_module.graph.nodes
                    if n.op == "call_function" and n.target is not operator.getitem
                    and not support.is_node_supported({}, n)})
    if not eager:
        return runner(compiler, graph_module, example_inputs)
    partitioner = CapabilityBasedPartitioner(graph_module, support, allows_single_node_partition=True)
    split = partitioner.partition_and_fuse()
    for node in split.graph.nodes:
        if node.op != "call_module":
            continue
        part = split.get_submodule(node.target)
        values = [arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg for arg in node.args]
        for placeholder, value in zip((n for n in part.graph.nodes if n.op == "placeholder"), values):
            placeholder.meta.setdefault("val", value)
        setattr(split, node.target, _CompiledPart(runner(compiler, part, values), _storage_layouts(part, node)))
    split.recompile()
    warnings.warn(f"lamina ran these ops in PyTorch, not lamina: {', '.join(eager)}", stacklevel=2)
    return split


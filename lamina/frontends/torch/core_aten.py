"""Lower an exported program to core ATen node by node.

``torch.export`` gives a graph of ATen ops as the program called them (``reshape``,
``transpose``, ``to``, ``matmul``); ``ExportedProgram.run_decompositions`` lowers it to core ATen by
tracing the whole program again, which takes as long as the export itself (a 22-layer model:
seconds). Most of a model's nodes are core ops already. ``rewritten`` lowers the others one by one:
the common ones by rules that their own node determines (``_LOWERINGS``), any other functional op
of known sizes by tracing that op alone through the same decompositions (``matmul``, which its
shapes lower to ``mm`` or ``bmm``), a ``no_grad`` or ``autocast(enabled=False)`` block by writing
its ops in its place, and an update of a temporary in place by its functional form. It returns
None for a graph that needs the whole trace (an op that writes through a view, which only a trace
of the program functionalizes; an op of sizes known only at run time), which the caller then
lowers by ``run_decompositions``. Both give the same ops (the tests compare them model by model);
the rewritten graph keeps the export's node names.
"""

from __future__ import annotations

import operator
from typing import Callable, Mapping

import torch
from torch.export import ExportedProgram
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.operator_schemas import normalize_function
from torch.export.graph_signature import ExportGraphSignature, OutputSpec, TensorArgument

aten = torch.ops.aten


def rewritten(exported: ExportedProgram, table: Mapping, keep: frozenset[str]) -> ExportedProgram | None:
    """``exported`` in core ATen, its ops outside ``keep`` decomposed as ``table`` would (its graph
    rewritten in place), or None where some op needs the whole trace (``exported`` then untouched
    but for what changes nothing: its ``no_grad`` and disabled autocast blocks written in place, and
    its updates of temporaries in their functional form)."""
    module, graph = exported.graph_module, exported.graph
    _inline_blocks(module)
    _functional_updates(graph)
    calls = [node for node in graph.nodes if node.op == "call_function"]
    lowered = [node for node in calls if node.target in _LOWERINGS and str(node.target) not in keep]
    chosen = set(lowered)
    others = [node for node in calls if node not in chosen]
    traced = [node for node in others if not _settled(node.target, table, keep)]
    if not all(map(_lowerable, lowered)) or not all(map(_traceable, traced)):
        return None
    with _fake_mode_of(graph):
        pieces = [_trace_alone(node, table) for node in traced]
        if any(_writes_in_place(piece) for piece in pieces):
            return None
        for node in lowered:
            _LOWERINGS[node.target](graph, node)
        for node, piece in zip(traced, pieces):
            _spliced(graph, node, piece)
    graph.eliminate_dead_code()
    module.recompile()
    return _with_graph(exported, module)


def _inline_blocks(module: torch.fx.GraphModule) -> None:
    """Each block that changes nothing a forward pass computes written in its place: a
    ``torch.no_grad()`` (or ``enable_grad``) block, which export keeps as a
    ``wrap_with_set_grad_enabled`` call of a submodule (a rotary embedding's angles), and a
    ``torch.autocast(enabled=False)`` block (``wrap_with_autocast``), which outside any autocast,
    as the graph's top level is, changes nothing either. Blocks within blocks are written out in turn."""
    graph = module.graph
    while True:
        blocks = [node for node in graph.nodes if _inlined_block(node) is not None]
        if not blocks:
            return
        for node in blocks:
            holder, inputs = _inlined_block(node)
            _write_in_place(module, node, holder, inputs)


def _inlined_block(node: torch.fx.Node) -> tuple[torch.fx.Node, tuple] | None:
    """The submodule and the arguments of a block ``_inline_blocks`` writes in place, else None."""
    if node.op != "call_function" or not all(user.target is operator.getitem for user in node.users):
        return None
    if node.target is _WRAP_WITH_SET_GRAD_ENABLED:
        return node.args[1], node.args[2:]
    if node.target is _WRAP_WITH_AUTOCAST and node.args[2] is False:
        return node.args[4], node.args[5:]
    return None


def _write_in_place(module: torch.fx.GraphModule, node: torch.fx.Node, holder: torch.fx.Node, inputs: tuple) -> None:
    graph = module.graph
    body = getattr(module, holder.target)
    for attribute in [n for n in body.graph.nodes if n.op == "get_attr"]:  # a block within: now the module's
        name = f"{holder.target}_{attribute.target}"
        setattr(module, name, getattr(body, attribute.target))
        attribute.target = name
    placeholders = [n for n in body.graph.nodes if n.op == "placeholder"]
    with graph.inserting_before(node):
        results = graph.graph_copy(body.graph, dict(zip(placeholders, inputs)))
    results = results if isinstance(results, (tuple, list)) else (results,)
    for user in list(node.users):
        user.replace_all_uses_with(results[user.args[1]])
        graph.erase_node(user)
    graph.erase_node(node)
    if not holder.users:
        graph.erase_node(holder)
        delattr(module, holder.target)


def _functional_updates(graph: torch.fx.Graph) -> None:
    """Each in-place update of a temporary that nothing else sees (``buckets += ...`` where
    ``buckets`` is the fresh result of an op that no view reads: T5's relative position buckets)
    written as the op's functional form, which the later readers of the temporary read instead:
    what the whole trace's functionalization makes of it."""
    for node in list(graph.nodes):
        functional = _functional_form(node)
        updated = node.args[0] if functional is not None else None
        if not (_fresh(updated) and all(_fresh(user) for user in updated.users if user is not node)):
            continue
        with graph.inserting_before(node):
            result = graph.call_function(functional, node.args, node.kwargs)
        result.meta.update(node.meta)
        later = _after(graph, node)
        for user in [user for user in updated.users if user in later]:
            user.replace_input_with(updated, result)
        node.replace_all_uses_with(result)
        graph.erase_node(node)


def _functional_form(node: torch.fx.Node):
    """The functional overload of an op that updates its first argument in place (``add_.Tensor``:
    ``add.Tensor``), else None."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return None
    schema = node.target._schema
    first = schema.arguments[0].alias_info if schema.arguments else None
    name = schema.name.split("::")[-1]
    if first is None or not first.is_write or not name.endswith("_") or not node.args:
        return None
    packet = getattr(aten, name[:-1], None)
    functional = getattr(packet, node.target._overloadname, None) if packet is not None else None
    return functional if functional is not None and not functional._schema.is_mutable else None


def _fresh(node) -> bool:
    """Whether ``node`` is an op's tensor that shares memory with nothing: not a view, not an update."""
    if not (isinstance(node, torch.fx.Node) and node.op == "call_function"
            and isinstance(node.target, torch._ops.OpOverload)):
        return False
    schema = node.target._schema
    return not schema.is_mutable and all(r.alias_info is None for r in schema.returns)


def _after(graph: torch.fx.Graph, node: torch.fx.Node) -> set[torch.fx.Node]:
    later, seen = set(), False
    for other in graph.nodes:
        if seen:
            later.add(other)
        seen = seen or other is node
    return later


_WRAP_WITH_AUTOCAST = getattr(torch.ops.higher_order, "wrap_with_autocast", None)
_WRAP_WITH_SET_GRAD_ENABLED = getattr(torch.ops.higher_order, "wrap_with_set_grad_enabled", None)


def _traceable(node: torch.fx.Node) -> bool:
    """Whether ``_trace_alone`` can lower ``node``: a functional ATen op of one tensor result,
    whose tensor arguments' sizes are known (its other arguments are constants)."""
    if not isinstance(node.target, torch._ops.OpOverload) or node.target._schema.is_mutable:
        return False
    leaves = torch.utils._pytree.tree_leaves((node.args, node.kwargs))
    inputs = [leaf for leaf in leaves if isinstance(leaf, torch.fx.Node)]
    return _static_tensor(node) and all(map(_static_tensor, inputs))


def _static_tensor(node: torch.fx.Node) -> bool:
    value = node.meta.get("val")
    return isinstance(value, torch.Tensor) and all(isinstance(size, int) for size in value.shape)


def _trace_alone(node: torch.fx.Node, table: Mapping) -> torch.fx.GraphModule:
    """The core ops that ``node``'s decomposition traces to on its inputs' values: what
    ``run_decompositions`` does for the whole program, for this one node."""
    leaves, spec = torch.utils._pytree.tree_flatten((node.args, node.kwargs))
    tensors = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.fx.Node)]

    def call(*values):
        filled = list(leaves)
        for i, value in zip(tensors, values):
            filled[i] = value
        args, kwargs = torch.utils._pytree.tree_unflatten(filled, spec)
        return node.target(*args, **kwargs)

    return make_fx(call, decomposition_table=table)(*(leaves[i].meta["val"] for i in tensors))


def _writes_in_place(piece: torch.fx.GraphModule) -> bool:
    """Whether a traced piece writes in place (``matmul`` of a vector squeezes its product in
    place), which only the whole program's trace functionalizes."""
    return any(isinstance(n.target, torch._ops.OpOverload) and n.target._schema.is_mutable
               for n in piece.graph.nodes)


def _spliced(graph: torch.fx.Graph, node: torch.fx.Node, piece: torch.fx.GraphModule) -> None:
    """``node`` replaced by ``piece``'s ops, which take its source line."""
    leaves = torch.utils._pytree.tree_leaves((node.args, node.kwargs))
    inputs = [leaf for leaf in leaves if isinstance(leaf, torch.fx.Node)]
    placeholders = [n for n in piece.graph.nodes if n.op == "placeholder"]
    copied = dict(zip(placeholders, inputs))
    with graph.inserting_before(node):
        result = graph.graph_copy(piece.graph, copied)
    for old, new in copied.items():
        if old.op != "placeholder":
            new.meta.update({key: node.meta[key] for key in ("stack_trace", "nn_module_stack") if key in node.meta})
    node.replace_all_uses_with(result)
    graph.erase_node(node)


def _settled(op, table: Mapping, keep: frozenset[str]) -> bool:
    """Whether ``op`` stays as it is through ``run_decompositions``."""
    if not isinstance(op, torch._ops.OpOverload):
        return op is operator.getitem
    if str(op) in keep:
        return True
    if op in table or op._schema.is_mutable:
        return False
    return not torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")


def _lowerable(node: torch.fx.Node) -> bool:
    """Whether the rewrite of ``node``'s op covers this call: not a ``to`` into another memory
    format, not a dropout or batch norm in training, not a convolution padded by a word, not a split
    of a length known only at run time, not an adaptive pool to more than one element a channel."""
    options = normalize_function(node.target, node.args, node.kwargs, normalize_to_only_use_kwargs=True).kwargs
    if node.target in (aten.to.dtype, aten.to.device, aten.to.dtype_layout):
        return options.get("memory_format") in (None, torch.preserve_format)
    if node.target in (aten.conv1d.default, aten.conv2d.default):
        return not isinstance(options.get("padding"), str)
    if node.target is aten.adaptive_avg_pool2d.default:
        return all(size == 1 for size in options["output_size"])
    if node.target is aten.batch_norm.default:
        return not options.get("training")
    if node.target in (aten.split.Tensor, aten.chunk.default):
        extent = _value(node.args[0]).shape[options["dim"]]
        return isinstance(extent, int) and isinstance(node.args[1], int) and node.args[1] > 0
    return node.target is not aten.dropout.default or not options.get("train")


def _fake_mode_of(graph: torch.fx.Graph):
    """The fake mode of the graph's values, under which the rewrites compute new nodes' values."""
    values = [node.meta["val"] for node in graph.nodes if isinstance(node.meta.get("val"), torch.Tensor)]
    mode = torch._guards.detect_fake_mode(values)
    return mode if mode is not None else torch._subclasses.FakeTensorMode()


def _with_graph(exported: ExportedProgram, module: torch.fx.GraphModule) -> ExportedProgram:
    """``exported`` with ``module``'s graph: its outputs' names taken from the new output node."""
    (returned,) = [node for node in module.graph.nodes if node.op == "output"]
    specs = []
    for spec, value in zip(exported.graph_signature.output_specs, returned.args[0]):
        if isinstance(spec.arg, TensorArgument) and isinstance(value, torch.fx.Node):
            spec = OutputSpec(spec.kind, TensorArgument(value.name), spec.target)
        specs.append(spec)
    signature = ExportGraphSignature(exported.graph_signature.input_specs, specs)
    return ExportedProgram(root=module, graph=module.graph, graph_signature=signature,
                           state_dict=exported.state_dict, range_constraints=exported.range_constraints,
                           module_call_graph=exported.module_call_graph, example_inputs=exported.example_inputs,
                           constants=exported.constants, verifiers=exported.verifiers)


# --- the rewrites: each changes its node in place (keeping its name and value), with a node before
# --- it where ATen's lowering takes two, or drops it for its input -----------------------------------


def _call(graph: torch.fx.Graph, target, args: tuple, kwargs: dict | None = None) -> torch.fx.Node:
    """A new node of ``target``, named after its op as a trace names it (``clone``, not ``clone_default``)."""
    return graph.create_node("call_function", target, args, kwargs, name=target.overloadpacket.__name__)


def _becomes(node: torch.fx.Node, target, args: tuple, kwargs: dict | None = None) -> None:
    node.target, node.args, node.kwargs = target, args, kwargs or {}


def _dropped_for(graph: torch.fx.Graph, node: torch.fx.Node, source: torch.fx.Node) -> None:
    node.replace_all_uses_with(source)
    graph.erase_node(node)


def _value(arg):
    return arg.meta["val"] if isinstance(arg, torch.fx.Node) else arg


def _to(graph: torch.fx.Graph, node: torch.fx.Node):
    """``to`` of a dtype, a device or both: the input itself where nothing changes, else ``_to_copy``."""
    source, out = node.args[0], node.meta["val"]
    value = source.meta["val"]
    options = normalize_function(node.target, node.args, node.kwargs, normalize_to_only_use_kwargs=True).kwargs
    if out.dtype == value.dtype and out.device == value.device and not options.get("copy"):
        return _dropped_for(graph, node, source)
    kwargs = {"dtype": out.dtype} if out.dtype != value.dtype else {}
    if out.device != value.device:
        kwargs["device"] = out.device
    _becomes(node, aten._to_copy.default, (source,), kwargs)


def _reshape(graph: torch.fx.Graph, node: torch.fx.Node):
    """A view where the strides allow one, else a contiguous copy viewed, as ATen's ``reshape``
    (and ``flatten``, a reshape to its output's shape)."""
    source = node.args[0]
    shape = node.args[1] if node.target is aten.reshape.default else list(node.meta["val"].shape)
    try:
        source.meta["val"].view([_value(size) for size in shape])
    except (RuntimeError, ValueError):  # strides no view can take
        with graph.inserting_before(node):
            contiguous = _call(graph, aten.clone.default, (source,), {"memory_format": torch.contiguous_format})
        contiguous.meta = {**node.meta, "val": source.meta["val"].clone(memory_format=torch.contiguous_format)}
        source = contiguous
    _becomes(node, aten.view.default, (source, shape))


def _transpose(graph: torch.fx.Graph, node: torch.fx.Node):
    source, first, second = node.args
    rank = source.meta["val"].dim()
    order = list(range(rank))
    first, second = first % max(rank, 1), second % max(rank, 1)
    order[first], order[second] = order[second], order[first]
    _becomes(node, aten.permute.default, (source, order))


def _same_as_input(graph: torch.fx.Graph, node: torch.fx.Node):
    return _dropped_for(graph, node, node.args[0])


def _renamed(target) -> Callable:
    def rewrite(graph: torch.fx.Graph, node: torch.fx.Node):
        _becomes(node, target, node.args, node.kwargs)
    return rewrite


def _arange(graph: torch.fx.Graph, node: torch.fx.Node):
    start, end = (0, node.args[0]) if node.target is aten.arange.default else node.args[:2]
    _becomes(node, aten.arange.start_step, (start, end), {"layout": torch.strided, **node.kwargs})


def _filled(one: bool) -> Callable:
    """``new_ones`` / ``new_zeros`` as ``full`` of their value."""
    def rewrite(graph: torch.fx.Graph, node: torch.fx.Node):
        out = node.meta["val"]
        fill = one if out.dtype == torch.bool else int(one)
        _becomes(node, aten.full.default, (node.args[1], fill),
                 {"dtype": out.dtype, "layout": torch.strided, "device": out.device, "pin_memory": False})
    return rewrite


def _type_as(graph: torch.fx.Graph, node: torch.fx.Node):
    """``x.type_as(y)``: ``x`` where the dtypes agree, else ``_to_copy`` to ``y``'s."""
    source = node.args[0]
    if source.meta["val"].dtype == node.meta["val"].dtype:
        return _dropped_for(graph, node, source)
    _becomes(node, aten._to_copy.default, (source,), {"dtype": node.meta["val"].dtype})


def _contiguous(graph: torch.fx.Graph, node: torch.fx.Node):
    """The input where it is contiguous, else a contiguous copy."""
    source = node.args[0]
    if source.meta["val"].is_contiguous():
        return _dropped_for(graph, node, source)
    _becomes(node, aten.clone.default, (source,), {"memory_format": torch.contiguous_format})


def _layer_norm(graph: torch.fx.Graph, node: torch.fx.Node):
    """``native_layer_norm``'s first result."""
    options = normalize_function(node.target, node.args, node.kwargs, normalize_to_only_use_kwargs=True).kwargs
    args = (options["input"], options["normalized_shape"], options.get("weight"), options.get("bias"),
            options.get("eps", 1e-5))
    with graph.inserting_before(node):
        norm = _call(graph, aten.native_layer_norm.default, args)
    norm.meta = {**node.meta, "val": aten.native_layer_norm.default(*map(_value, args))}
    _becomes(node, operator.getitem, (norm, 0))


def _split(graph: torch.fx.Graph, node: torch.fx.Node):
    """``split`` into pieces of one size, and ``chunk``, as ``split_with_sizes``."""
    source, parts, dim = node.args[0], node.args[1], node.args[2] if len(node.args) > 2 else 0
    extent = source.meta["val"].shape[dim]
    size = -(-extent // parts) if node.target is aten.chunk.default else parts
    sizes = [min(size, extent - start) for start in range(0, extent, size)] if size else [0]
    _becomes(node, aten.split_with_sizes.default, (source, sizes, dim))


def _first_result(target, arguments: Callable) -> Callable:
    """An op that ATen lowers to the first result of ``target`` (``arguments`` maps the call's
    arguments, by name, to ``target``'s)."""
    def rewrite(graph: torch.fx.Graph, node: torch.fx.Node):
        options = normalize_function(node.target, node.args, node.kwargs, normalize_to_only_use_kwargs=True).kwargs
        args = arguments(options)
        with graph.inserting_before(node):
            whole = _call(graph, target, args)
        whole.meta = {**node.meta, "val": target(*map(_value, args))}
        _becomes(node, operator.getitem, (whole, 0))
    return rewrite


def _convolution(graph: torch.fx.Graph, node: torch.fx.Node):
    options = normalize_function(node.target, node.args, node.kwargs, normalize_to_only_use_kwargs=True).kwargs
    dims = node.meta["val"].dim() - 2
    _becomes(node, aten.convolution.default, (
        options["input"], options["weight"], options.get("bias"), list(options.get("stride", [1] * dims)),
        list(options.get("padding", [0] * dims)), list(options.get("dilation", [1] * dims)), False, [0] * dims,
        options.get("groups", 1)))


def _global_average(graph: torch.fx.Graph, node: torch.fx.Node):
    """An adaptive average pool to one element a channel: the mean over the last two dimensions."""
    _becomes(node, aten.mean.dim, (node.args[0], [-1, -2], True))


def _dropout(graph: torch.fx.Graph, node: torch.fx.Node):
    """Dropout outside training is a copy of its input, as ATen's decomposition writes it."""
    _becomes(node, aten.clone.default, (node.args[0],))


_LOWERINGS: dict = {
    aten.to.dtype: _to, aten.to.device: _to, aten.to.dtype_layout: _to,
    aten.reshape.default: _reshape,
    aten.transpose.int: _transpose,
    aten.detach_.default: _same_as_input, aten.detach.default: _renamed(aten.alias.default),
    aten.lift_fresh_copy.default: _renamed(aten.clone.default),
    aten.__and__.Tensor: _renamed(aten.bitwise_and.Tensor), aten.__or__.Tensor: _renamed(aten.bitwise_or.Tensor),
    aten.__xor__.Tensor: _renamed(aten.bitwise_xor.Tensor),
    aten.arange.default: _arange, aten.arange.start: _arange,
    aten.new_ones.default: _filled(True), aten.new_zeros.default: _filled(False),
    aten.dropout.default: _dropout,
    aten.type_as.default: _type_as, aten.contiguous.default: _contiguous, aten.layer_norm.default: _layer_norm,
    aten.split.Tensor: _split, aten.chunk.default: _split,
    aten.flatten.using_ints: _reshape, aten.adaptive_avg_pool2d.default: _global_average,
    aten.conv1d.default: _convolution, aten.conv2d.default: _convolution,
    aten.batch_norm.default: _first_result(aten._native_batch_norm_legit_no_training.default, lambda o: (
        o["input"], o.get("weight"), o.get("bias"), o["running_mean"], o["running_var"], o["momentum"], o["eps"])),
    aten.max_pool2d.default: _first_result(aten.max_pool2d_with_indices.default, lambda o: (
        o["input"], o["kernel_size"], o.get("stride", []), o.get("padding", [0, 0]), o.get("dilation", [1, 1]),
        o.get("ceil_mode", False))),
}
"""How each op that ``run_decompositions`` would lower is lowered here."""

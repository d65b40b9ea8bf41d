"""``torch.compile(model, backend="lamina")``: lamina as a TorchDynamo backend.

Dynamo hands over an FX graph of torch-level ops; AOTAutograd lowers it to core ATen
(keeping lamina's keep-list whole) and passes the forward graph here, and the backward
graph when an input or a parameter requires grad in grad mode: lamina compiles both, so
``loss.backward()`` gets gradients as in eager. AOTAutograd also keeps eager's aliasing:
an output that is an input, a view of one or another output is returned as such. An
inference graph updates its inputs itself (a key-value cache: AOTAutograd keeps the input
mutations in the graph as ``copy_`` into them), so the update is part of the program and of
its CUDA graph rather than copies that PyTorch launches after each call.
Parameters and buffers arrive as arguments, so they are never copied into the program,
and Dynamo guards the rest (a replaced module tensor is a new argument or a new graph).
``options`` are lamina settings (``schedule``, ``backend``, ``keep``, ...) plus
``fallback``: with ``"error"`` (the default) an op that no plugin decomposes is an error
listing every such op; with ``"eager"`` the graph is split into the parts lamina
supports, which it compiles, and the rest, which runs in PyTorch, and a warning names
the ops that ran there (``eager_fallback``). ``mode="reduce-overhead"`` (or the option ``cuda_graphs=True``,
where other options are given: ``torch.compile`` takes a mode or options, not both) replays
each inference call on a GPU from a CUDA graph (``cuda_graphs``).

A graph whose sizes Dynamo made symbolic (``dynamic=True``, or a size that changed between
calls) compiles once for every size (``lamina.core.ir.sizes``), where each step of the pipeline
can take a size known only at run time; where one cannot, lamina says why and compiles each new
size once more, on its first call, like a graph of concrete sizes called with other shapes (the
second size of such a graph warns that a size changing at every call compiles at every call).
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Sequence

import torch
from torch.utils._python_dispatch import _disable_current_modes

from lamina.api import Compiler, Specialization, signature
from lamina.core.errors import ConfigError, InputMismatchError, LaminaError, UnsupportedOpError
from lamina.frontends.torch.call_binding import output_value
from lamina.frontends.torch.fx_graph import (Constant, FxProgram, SizeValue, fx_to_torch_ir, is_write_to_argument,
                                             length_tensor)
from lamina.integrations.cuda_graphs import CudaGraphReplay, uses_cuda_graphs
from lamina.integrations.eager_fallback import EAGER_FALLBACK_REMEDY, check_dtypes, with_eager_fallback

FALLBACKS = (None, "error", "eager")


def lamina_backend(graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any],
                   options: dict[str, Any] | None = None, mode: str | None = None):
    """The entry point that ``torch.compile`` finds under the name ``lamina``."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    settings = dict(options or {})
    fallback = settings.pop("fallback", None)
    if fallback not in FALLBACKS:
        raise ConfigError(f"unknown fallback {fallback!r}; use 'eager' to run unsupported ops in PyTorch, "
                          "or leave it out to make them an error")
    graphs = uses_cuda_graphs(mode, settings.pop("cuda_graphs", None))
    compiler = Compiler(**settings)
    training = _needs_gradients(example_inputs)

    def compile_graph(aten_graph: torch.fx.GraphModule, inputs: Sequence[Any]):
        if fallback == "eager":
            return with_eager_fallback(aten_graph, inputs, compiler, GraphRunner)
        check_dtypes(aten_graph)
        try:
            return GraphRunner(compiler, aten_graph, inputs)
        except UnsupportedOpError as error:
            raise UnsupportedOpError(error.ops, EAGER_FALLBACK_REMEDY) from None

    def compile_forward(aten_graph: torch.fx.GraphModule, inputs: Sequence[Any]):
        run = compile_graph(aten_graph, inputs)
        if graphs and not training:
            run = CudaGraphReplay(run, _mutated_inputs(), _written_arguments(aten_graph), static=_is_static(aten_graph))
        return make_boxed_func(run)

    backend = aot_autograd(fw_compiler=compile_forward, bw_compiler=lambda g, i: make_boxed_func(compile_graph(g, i)),
                           decompositions=decompositions(compiler.keep), keep_inference_input_mutations=True)
    with _differentiable_attention(training):
        return backend(graph_module, example_inputs)


def _mutated_inputs() -> int:
    """How many inputs the forward graph being compiled mutates: AOTAutograd returns their new
    values as its first outputs and copies them into the inputs."""
    context = torch._guards.TracingContext.try_get()
    metadata = getattr(context, "fw_metadata", None)
    return metadata.num_mutated_inp_runtime_indices if metadata is not None else 0


def _written_arguments(aten_graph: torch.fx.GraphModule) -> frozenset[int]:
    """The positions of the arguments that the graph updates in place (``copy_`` into them: the
    input mutations that AOTAutograd keeps in an inference graph)."""
    placeholders = [n for n in aten_graph.graph.nodes if n.op == "placeholder"]
    return frozenset(placeholders.index(n.args[0]) for n in aten_graph.graph.nodes if is_write_to_argument(n))


def _needs_gradients(example_inputs: Sequence[Any]) -> bool:
    """Whether AOTAutograd will trace a backward graph: as it decides, grad mode is on and an
    input (parameters are inputs) requires grad."""
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs)


def _differentiable_attention(training: bool):
    """Where a backward graph is traced, attention as its math (matmuls and a softmax), whose
    backward is made of ops lamina compiles; PyTorch's fused attention kernels have backward ops
    of their own (``_scaled_dot_product_flash_attention_for_cpu_backward``, ...) that no plugin
    decomposes. Inference keeps ``scaled_dot_product_attention`` whole."""
    if not training:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.MATH])


def decompositions(keep: Sequence[str]) -> dict:
    """PyTorch's core ATen decompositions, less the composite ops that lamina keeps whole."""
    from torch._decomp import core_aten_decompositions

    table = dict(core_aten_decompositions())
    kept = set(keep)
    return {op: fn for op, fn in table.items() if str(op) not in kept}


class GraphRunner:
    """An ATen FX graph compiled by lamina: once, where its sizes are concrete or where every step
    takes sizes known only at run time (``s0``); else once per signature of its arguments."""

    def __init__(self, compiler: Compiler, graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any]):
        self.compiler = compiler
        self.graph_module = graph_module
        self._specializations: dict[tuple, tuple[FxProgram, Specialization | None]] = {}
        self._for_every_size: tuple[FxProgram, Specialization | None] | None = None
        if _is_static(graph_module):
            self._specializations[signature(example_inputs)] = self._compile(graph_module, example_inputs)
        else:
            self._for_every_size = self._compile_for_every_size(graph_module, example_inputs)

    def _compile_for_every_size(self, graph_module: torch.fx.GraphModule, inputs: Sequence[Any]):
        """The graph compiled once with its symbolic sizes, or None (with a warning saying why) where a
        step cannot take a size known only at run time, or where the graph traced with symbolic sizes
        cannot be compiled otherwise (it holds ops that the one traced with the call's sizes does not:
        a scale computed from a symbolic size, ``true_divide``): each new size then compiles once more,
        as a graph of concrete sizes, which is what the call needs."""
        try:
            return self._compile(graph_module, inputs)
        except LaminaError as e:
            reason = str(e).replace("\n", " ")
            warnings.warn(f"lamina compiles this graph for each new size of its dynamic dimensions: {reason}",
                          stacklevel=4)
            return None

    def _compile(self, graph_module: torch.fx.GraphModule, inputs: Sequence[Any]):
        program = fx_to_torch_ir(graph_module)
        if not program.captured.graph.outputs:
            return program, None
        return program, self.compiler.compile_captured(program.captured, list(inputs))

    def _specialization(self, args: Sequence[Any]):
        if self._for_every_size is not None:
            return self._for_every_size
        key = signature(args)
        if key not in self._specializations:
            from torch.fx.experimental.proxy_tensor import make_fx

            if len(self._specializations) == 1:
                _warn_of_new_sizes(next(iter(self._specializations)), key)
            concrete = make_fx(self.graph_module, tracing_mode="fake")(*args)
            self._specializations[key] = self._compile(concrete, args)
        return self._specializations[key]

    def __call__(self, *args: Any) -> tuple:
        """The graph's outputs for ``args``.

        lamina's kernels run outside any dispatch mode that is active: AOTAutograd runs a
        compiled graph's first call under one that inspects every op for aliasing, and the
        ops it would see are the simulator's own or allocations, not the program's (on the
        simulator, it made that first call three times slower)."""
        program, compiled = self._specialization(args)
        with _disable_current_modes():
            device = _device(args)
            given = tuple(length_tensor(a, device) if i in program.lengths else a for i, a in enumerate(args)) \
                if program.lengths else tuple(args)
            computed = compiled(given, device) if compiled is not None else []
            for position, source in program.writes:
                new_value = output_value(source, args, computed)
                if not _same_tensor(new_value, args[position]):  # else the program wrote it in place
                    args[position].copy_(new_value)
        return tuple(source.value if isinstance(source, Constant) else source.value(args)
                     if isinstance(source, SizeValue) else output_value(source, args, computed)
                     for source in program.outputs)


def _same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype


def _warn_of_new_sizes(first: tuple, now: tuple) -> None:
    """Once per graph, at its second size: a size that changes at every call compiles at every call."""
    changed = [f"argument {i}: {a[0]} then {b[0]}" for i, (a, b) in enumerate(zip(first, now))
               if a != b and isinstance(a[0], tuple)][:3]
    warnings.warn(
        f"lamina compiles this graph again for new sizes ({'; '.join(changed)}): each compiled program is "
        "specialised to its shapes, so a size that changes at every call compiles at every call. With "
        "transformers' generate, whose default cache grows by a token at each step, pass "
        "cache_implementation='static'", stacklevel=3)


def _is_static(graph_module: torch.fx.GraphModule) -> bool:
    for node in graph_module.graph.nodes:
        value = node.meta.get("val")
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return False
        if isinstance(value, torch.Tensor) and not all(isinstance(size, int) for size in value.shape):
            return False
    return True


def _device(args: Sequence[Any]) -> torch.device:
    """The device of the tensor arguments; a CPU scalar may sit beside GPU tensors, as in eager
    PyTorch (a static key-value cache counts its length in one before its first update)."""
    devices = {a.device for a in args if isinstance(a, torch.Tensor)}
    if len(devices) > 1:
        devices -= {a.device for a in args if isinstance(a, torch.Tensor) and a.dim() == 0 and a.device.type == "cpu"}
    if len(devices) > 1:
        raise InputMismatchError(f"inputs are on several devices ({', '.join(map(str, devices))}); put them on one")
    return devices.pop() if devices else torch.device("cpu")

"""``lamina.compile``: from a PyTorch program and example inputs to a callable.

The compiled function is specialised to the shapes and dtypes of its inputs (a new
signature compiles once more and is cached), then runs on the backend that matches the
inputs' device: CUDA tensors on the GPU, CPU tensors on the Kernel IR simulator.
"""

from __future__ import annotations

import time
import warnings
from typing import Any, Callable, Mapping, Sequence

import torch
from torch.utils._python_dispatch import _disable_current_modes

from lamina.core.config import Config, load_config
from lamina.core.errors import DeviceError, InputMismatchError, LaminaError, SymbolicSizeError
from lamina.core.garbage_collection import cycle_collector_paused
from lamina.core.ir import sizes
from lamina.core.pipeline import Compilation, Pipeline
from lamina.core.plugins import PluginManager, get_plugin_manager
from lamina.frontends.torch.call_binding import CallBinding, StaleCapture, run_in_autograd
from lamina.frontends.torch import capture_cache
from lamina.frontends.torch.capture import DEFAULT_KEEP, Captured, capture, check_argument_kinds
from lamina.frontends.torch.containers import flatten_call, structured
from lamina.runtime.memory_plan import MemoryPlan, plan_memory
from lamina.runtime.program_runner import torch_dtype


class Compiler:
    """Compiles programs under one configuration and its loaded plugins.

    ``plugins`` is a ready plugin manager to use instead of the one the configuration
    loads (a plugin author's test registers a plugin in one by hand).
    """

    def __init__(self, config: Config | None = None, plugins: PluginManager | None = None, **overrides: Any):
        self.config = config if config is not None else load_config(**overrides)
        self._plugins = plugins

    @property
    def plugins(self) -> PluginManager:
        if self._plugins is None:
            self._plugins = get_plugin_manager(self.config)
        return self._plugins

    @property
    def keep(self) -> tuple[str, ...]:
        """The composite ops kept whole: the configuration's list, else lamina's default."""
        return tuple(self.config.keep) if self.config.keep is not None else DEFAULT_KEEP

    def backend(self, name: str):
        entry = self.plugins.registry.get("backend", name)
        if entry is None:
            known = ", ".join(self.plugins.registry.names("backend"))
            raise LaminaError(f"unknown backend {name!r}; registered backends: {known}")
        return entry.provider

    def compile(self, program: Callable | torch.nn.Module, example_inputs: Sequence[Any] = (),
                example_kwargs: Mapping[str, Any] | None = None, dynamic_shapes: Any = None) -> "CompiledFunction":
        return CompiledFunction(self, program, tuple(example_inputs), dict(example_kwargs or {}), dynamic_shapes)

    def specialize(self, program: Callable | torch.nn.Module, example_inputs: tuple,
                   example_kwargs: Mapping[str, Any] | None = None, dynamic_shapes: Any = None) -> "Specialization":
        """``program`` captured and compiled for the shapes and dtypes of ``example_inputs`` and
        ``example_kwargs``, the axes that ``dynamic_shapes`` names for every size."""
        started = time.perf_counter()
        captured, stage = self._captured(program, example_inputs, example_kwargs, dynamic_shapes)
        captured_in = time.perf_counter() - started
        specialization = self.compile_captured(captured, flatten_call(example_inputs, example_kwargs or {})[0],
                                               started)
        specialization.compilation.timings.add_first(stage, captured_in)
        return specialization

    def _captured(self, program: Callable | torch.nn.Module, example_inputs: tuple,
                  example_kwargs: Mapping[str, Any] | None, dynamic_shapes: Any) -> tuple[Captured, str]:
        """``program`` captured for the call, from the capture cache where an earlier process kept it
        (``capture_cache``), and the name of the stage that took the time."""
        pipeline = Pipeline(self.config, self.plugins)
        code = pipeline.cached_code()
        key = code and capture_cache.call_key(program, example_inputs, example_kwargs, dynamic_shapes, self.keep, code)
        store = pipeline.cache(capture_cache.FOLDER) if key else None
        kept = store.get(key) if store is not None else None
        if kept is not None:
            return capture_cache.bound(kept, program), LOADED_CAPTURE
        captured = capture(program, example_inputs, keep=self.keep, example_kwargs=example_kwargs,
                           dynamic_shapes=dynamic_shapes)
        if store is not None:
            store.put(key, capture_cache.unbound(captured))
        return captured, "capture"

    def compile_captured(self, captured: Captured, example_inputs: Sequence[Any],
                         started: float | None = None) -> "Specialization":
        """An already captured program compiled for the device of ``example_inputs`` (the call's leaves)."""
        started = time.perf_counter() if started is None else started
        pipeline = Pipeline(self.config, self.plugins)
        target = pipeline.target(_visible_arch(example_inputs))
        device = _gpu(example_inputs)
        with sizes.hinted(_size_hints(captured, example_inputs)):
            compilation = pipeline.compile(captured.graph, target, self._backend_on(device))
        specialization = Specialization(self, captured, compilation, 0.0)
        if device is not None:  # compile the kernels now, as part of compiling, not on the first call
            with _disable_current_modes(), cycle_collector_paused():
                specialization.runner(device)
        specialization.compile_seconds = time.perf_counter() - started
        return specialization

    def _backend_on(self, device: torch.device | None):
        """The backend that will run a program compiled for ``device``'s inputs right after the
        compile (``Specialization.runner``), where it can run here; None for inputs on the CPU."""
        if device is None:
            return None
        entry = self.plugins.registry.get("backend", self.config.backend or "cuda")
        return entry.provider if entry is not None and entry.provider.available() is None else None


LOADED_CAPTURE = "loading the captured module"
"""The stage of a compile that found its capture in the capture cache instead of exporting."""


def _size_hints(captured: Captured, example_inputs: Sequence[Any]) -> dict[str, int]:
    """What each size known only at run time is in the example: the cost model's guess of it."""
    graph = captured.graph
    if not any(sizes.is_symbolic(i.type.shape) for i in graph.inputs):
        return {}
    hints: dict[str, int] = {}
    for graph_input, position in zip(graph.inputs, captured.user_input_positions):
        example = example_inputs[position] if position is not None and position < len(example_inputs) else None
        for want, got in zip(graph_input.type.shape, getattr(example, "shape", ())):
            hint = got.node.hint if isinstance(got, torch.SymInt) else got
            found = sizes.solved(want, hint) if isinstance(hint, int) else None
            if found is not None:
                hints.setdefault(*found)
    return hints


def _gpu(inputs: Sequence[Any]) -> torch.device | None:
    return next((t.device for t in inputs if isinstance(t, torch.Tensor) and t.is_cuda), None)


def _visible_arch(inputs: Sequence[torch.Tensor]) -> str | None:
    device = _gpu(inputs)
    if device is None:
        return None
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


Signature = tuple[tuple[Any, Any], ...]


def signature(inputs: Sequence[Any]) -> Signature:
    """What a compiled program is specialised to: each tensor's shape and dtype, and the
    value of each Python number (capture bakes numbers into the program)."""
    return tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else (type(a), a) for a in inputs)


class Specialization:
    """One program compiled for one signature, with a runner per backend and device."""

    def __init__(self, compiler: Compiler, captured: Captured, compilation: Compilation, compile_seconds: float):
        self.compiler = compiler
        self.captured = captured
        self.compilation = compilation
        self.compile_seconds = compile_seconds
        self._runners: dict[tuple[str, torch.device], Any] = {}
        self._memory_plan: MemoryPlan | None = None
        self._moved_constants: dict[tuple[str, torch.device], torch.Tensor] = {}
        self.binding = CallBinding(captured, compilation.graph.inputs)
        self.symbolic = any(sizes.is_symbolic(i.type.shape) for i in compilation.graph.inputs)

    def takes(self, leaves: Sequence[Any], numbers: Signature) -> bool:
        """Whether this program, whose sizes ``s0``, ... are known only at run time, runs the call of
        flattened ``leaves``: the same Python numbers as ``numbers`` (the example's signature; capture
        bakes numbers in), the same dtypes, and shapes that the sizes give. An ``InputMismatchError``
        where a size lies outside the range the program was captured for."""
        if len(leaves) != len(numbers) or any(
                not isinstance(leaf, torch.Tensor) and (type(leaf), leaf) != number
                for leaf, number in zip(leaves, numbers)):
            return False
        shapes, actual = [], []
        for graph_input, position in zip(self.compilation.graph.inputs, self.captured.user_input_positions):
            leaf = leaves[position] if position is not None else None
            if isinstance(leaf, torch.Tensor):
                if leaf.dtype != torch_dtype(graph_input.type.dtype):
                    return False
                shapes.append((graph_input.name, graph_input.type.shape))
                actual.append(tuple(leaf.shape))
        try:
            values = sizes.bind(shapes, actual)
        except InputMismatchError:
            return False
        for name, value in values.items():
            low, high = self.captured.size_ranges.get(name, (1, None))
            if value < low or high is not None and value > high:
                where = next(f"axis {axis} of {graph_name}" for graph_name, shape in shapes
                             for axis, size in enumerate(shape) if size == sizes.symbol(int(name[1:])))
                raise InputMismatchError(
                    f"{where} takes sizes from {low} to {'any' if high is None else high} (the program's "
                    f"{name}, as dynamic_shapes declared it), and this call has {value}")
        return True

    @property
    def memory_plan(self) -> MemoryPlan:
        if self._memory_plan is None:
            self._memory_plan = plan_memory(self.compilation.loop, self.compilation.kernels)
        return self._memory_plan

    def runner(self, device: torch.device):
        name = self.compiler.config.backend or ("cuda" if device.type == "cuda" else "reference")
        key = (name, device)
        if key not in self._runners:
            backend = self.compiler.backend(name)
            reason = backend.available()
            if reason is not None:
                raise DeviceError(f"the {name} backend cannot run here: {reason}")
            with self.compilation.timings.stage(f"loading kernels ({name} backend)"):
                self._runners[key] = backend.load(self.compilation, self.compilation.target)
        return self._runners[key]

    def __call__(self, args: Sequence[Any], device: torch.device) -> list[torch.Tensor]:
        """The program's flat outputs for the flattened leaves ``args`` of a call.

        Module state is read from the module now (``call_binding``). A constant the program
        made itself may live on another device than the inputs (a CPU scalar tensor, which
        eager PyTorch mixes with CUDA tensors): it is copied to the inputs' device once.
        Module state on another device is the user's to move."""
        return self._launch(self.binding.inputs(args), device)

    def run(self, args: Sequence[Any], device: torch.device) -> list[torch.Tensor]:
        """What the program returns for the flattened leaves ``args``, flat: outputs that alias an
        input, module state or each other alias as in eager, and outputs computed from tensors that
        require grad (in grad mode) require grad, with a backward that raises ``InferenceOnlyError``."""
        inputs = self.binding.inputs(args)
        computed = run_in_autograd(lambda: self._launch(inputs, device), self.binding.requiring_grad(inputs))
        return self.binding.outputs(args, computed)

    def _launch(self, tensors: Sequence[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
        if device.type == "cuda" and device.index is None:  # "cuda" is the current GPU, where tensors say cuda:N
            device = torch.device("cuda", torch.cuda.current_device())
        inputs = []
        for graph_input, tensor in zip(self.compilation.graph.inputs, tensors):
            if tensor.device != device and graph_input.kind == "constant":
                tensor = self._constant_on(graph_input.name, tensor, device)
            elif tensor.device != device and tensor.device.type == "cpu" and tensor.dim() == 0:
                tensor = tensor.to(device)  # eager PyTorch takes a CPU scalar beside GPU tensors
            elif tensor.device != device:
                raise InputMismatchError(
                    f"{graph_input.name} is on {tensor.device}, the inputs on {device}; move the module to {device}"
                )
            inputs.append(tensor.detach())
        return self.runner(device)(*inputs)

    def _constant_on(self, name: str, tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
        key = (name, device)
        if key not in self._moved_constants:
            self._moved_constants[key] = tensor.detach().to(device)
        return self._moved_constants[key]

    def structured(self, outputs: Sequence[torch.Tensor]) -> Any:
        """``outputs`` in what the program returns: a tensor, a tuple, a model's output with its cache."""
        return structured(outputs, self.captured.output_structure)


CallKey = tuple[Any, Signature]
"""A call's structure (which arguments, nested how) and the signature of its leaves."""


class CompiledFunction:
    """A compiled program. Call it like the original; ``ir(level)`` prints any level.

    It is specialised to the shapes and dtypes of its inputs, and to which keyword
    arguments it is given: a call with inputs of a new shape or dtype, or with other
    keywords, compiles the program again for them, once, and keeps every
    specialisation. The axes named in ``dynamic_shapes`` (``torch.export.Dim``) are the
    exception: the first program takes every size of them within the declared range, and
    a size outside it is an ``InputMismatchError``. It returns what the program returns (a
    tensor, a tuple, a model's output with its KV cache). The attributes describe the example
    inputs' specialisation.
    """

    def __init__(self, compiler: Compiler, program: Callable | torch.nn.Module, example_inputs: tuple,
                 example_kwargs: Mapping[str, Any] | None = None, dynamic_shapes: Any = None):
        self.compiler = compiler
        self.program = program
        self._arity = len(example_inputs)
        example_kwargs = dict(example_kwargs or {})
        leaves, structure = flatten_call(example_inputs, example_kwargs)
        _check_kinds(leaves)
        try:
            first = compiler.specialize(program, example_inputs, example_kwargs, dynamic_shapes)
        except SymbolicSizeError as reason:
            if dynamic_shapes is None:
                raise
            warnings.warn(f"lamina compiles this program for each size of its dynamic axes: {reason}", stacklevel=3)
            first = compiler.specialize(program, example_inputs, example_kwargs)
        self._first = first
        self._for_every_size = first if first.symbolic else None
        self._structure, self._first_signature = structure, signature(leaves)
        self._specializations: dict[CallKey, Specialization] = {(structure, signature(leaves)): first}
        self.captured = first.captured
        self.compilation = first.compilation
        self.compile_seconds = first.compile_seconds

    def ir(self, level: str) -> str:
        return self.compilation.ir(level)

    @property
    def kernel_count(self) -> int:
        return len(self.compilation.kernels.kernels)

    @property
    def memory_plan(self) -> MemoryPlan:
        """When each buffer of the example inputs' specialisation is allocated and released."""
        return self._first.memory_plan

    @property
    def specializations(self) -> dict[Signature, Specialization]:
        """The signature of every call's leaves compiled so far, in the order they were first called."""
        return {key[1]: specialization for key, specialization in self._specializations.items()}

    def _check(self, args: tuple, leaves: list) -> torch.device:
        if len(args) != self._arity:
            raise InputMismatchError(
                f"this function was compiled for {self._arity} inputs and was called with {len(args)}"
            )
        _check_kinds(leaves)
        devices = {leaf.device for leaf in leaves if isinstance(leaf, torch.Tensor)}
        if len(devices) > 1:
            raise InputMismatchError(f"inputs are on several devices ({', '.join(map(str, devices))}); put them on one")
        return devices.pop() if devices else torch.device("cpu")

    def specialization(self, args: tuple, kwargs: Mapping[str, Any] | None = None) -> Specialization:
        """The program compiled for the shapes and dtypes of ``args`` and ``kwargs``, compiling it on first sight."""
        leaves, structure = flatten_call(args, kwargs or {})
        return self._specialization(args, kwargs or {}, (structure, signature(leaves)))

    def _specialization(self, args: tuple, kwargs: Mapping[str, Any], key: CallKey) -> Specialization:
        if key not in self._specializations:
            every_size = self._for_every_size
            if every_size is not None and key[0] == self._structure \
                    and every_size.takes(flatten_call(args, kwargs)[0], self._first_signature):
                return every_size
            self._specializations[key] = self.compiler.specialize(self.program, args, kwargs)
        return self._specializations[key]

    def runner(self, device: torch.device):
        """The example inputs' specialisation loaded on ``device``."""
        return self._first.runner(device)

    def __call__(self, *args: Any, **kwargs: Any):
        leaves, structure = flatten_call(args, kwargs)
        device = self._check(args, leaves)
        key = (structure, signature(leaves))
        specialization = self._specialization(args, kwargs, key)
        try:
            outputs = specialization.run(leaves, device)
        except StaleCapture:
            specialization = self._specializations[key] = self.compiler.specialize(self.program, args, kwargs)
            outputs = specialization.run(leaves, device)
        return specialization.structured(outputs)


def _check_kinds(leaves: list) -> None:
    try:
        check_argument_kinds(leaves, "input")
    except LaminaError as error:
        raise InputMismatchError(str(error)) from None


def compile(program: Callable | torch.nn.Module, example_inputs: Sequence[Any] = (),
            example_kwargs: Mapping[str, Any] | None = None, dynamic_shapes: Any = None,
            **settings: Any) -> CompiledFunction:
    """Compile ``program`` for a call shaped like ``program(*example_inputs, **example_kwargs)``.

    ``dynamic_shapes``, as ``torch.export.export`` takes it (``{0: torch.export.Dim("seq")}``
    for an input whose first axis varies), compiles those axes once for every size.
    ``settings`` override the configuration (``schedule="generic"``, ``backend=...``).
    """
    return Compiler(**settings).compile(program, example_inputs, example_kwargs, dynamic_shapes)

"""``lamina.compile``: from a PyTorch program and example inputs to a callable.

The compiled function is specialised to the shapes and dtypes of its inputs (a new
signature compiles once more and is cached), then runs on the backend that matches the
inputs' device: CUDA tensors on the GPU, CPU tensors on the Kernel IR simulator.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import torch

from lamina.backends.memory_plan import MemoryPlan, plan_memory
from lamina.core.config import Config, load_config
from lamina.core.errors import DeviceError, InputMismatchError, LaminaError
from lamina.core.pipeline import Compilation, Pipeline
from lamina.core.plugins import PluginManager, get_plugin_manager
from lamina.frontends.torch.capture import DEFAULT_KEEP, Captured, capture


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

    def compile(self, program: Callable | torch.nn.Module, example_inputs: Sequence[torch.Tensor]) -> "CompiledFunction":
        return CompiledFunction(self, program, tuple(example_inputs))

    def specialize(self, program: Callable | torch.nn.Module, example_inputs: tuple) -> "Specialization":
        """``program`` captured and compiled for the shapes and dtypes of ``example_inputs``."""
        started = time.perf_counter()
        captured = capture(program, example_inputs, keep=self.keep)
        return self.compile_captured(captured, example_inputs, started)

    def compile_captured(self, captured: Captured, example_inputs: Sequence[torch.Tensor],
                         started: float | None = None) -> "Specialization":
        """An already captured program compiled for the device of ``example_inputs``."""
        started = time.perf_counter() if started is None else started
        pipeline = Pipeline(self.config, self.plugins)
        target = pipeline.target(_visible_arch(example_inputs))
        compilation = pipeline.compile(captured.graph, target)
        return Specialization(self, captured, compilation, time.perf_counter() - started)


def _visible_arch(inputs: Sequence[torch.Tensor]) -> str | None:
    device = next((t.device for t in inputs if isinstance(t, torch.Tensor) and t.is_cuda), None)
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
            self._runners[key] = backend.load(self.compilation, self.compilation.target)
        return self._runners[key]

    def __call__(self, args: tuple, device: torch.device) -> list[torch.Tensor]:
        inputs = []
        for position, name in zip(self.captured.user_input_positions, (i.name for i in self.compilation.graph.inputs)):
            tensor = args[position] if position is not None else self.captured.constants[name]
            if tensor.device != device:
                raise InputMismatchError(
                    f"{name} is on {tensor.device}, the inputs on {device}; move the module to {device}"
                )
            inputs.append(tensor.detach())
        return self.runner(device)(*inputs)


class CompiledFunction:
    """A compiled program. Call it like the original; ``ir(level)`` prints any level.

    It is specialised to the shapes and dtypes of its inputs: a call with inputs of a new
    shape or dtype compiles the program again for them, once, and keeps every
    specialisation. The attributes describe the one for the example inputs.
    """

    def __init__(self, compiler: Compiler, program: Callable | torch.nn.Module, example_inputs: tuple):
        self.compiler = compiler
        self.program = program
        self._arity = len(example_inputs)
        _check_kinds(example_inputs)
        first = compiler.specialize(program, example_inputs)
        self._first = first
        self._specializations: dict[Signature, Specialization] = {signature(example_inputs): first}
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
        """Every signature compiled so far, in the order they were first called."""
        return dict(self._specializations)

    def _check(self, args: tuple) -> torch.device:
        if len(args) != self._arity:
            raise InputMismatchError(
                f"this function was compiled for {self._arity} inputs and was called with {len(args)}"
            )
        _check_kinds(args)
        devices = {arg.device for arg in args if isinstance(arg, torch.Tensor)}
        if len(devices) > 1:
            raise InputMismatchError(f"inputs are on several devices ({', '.join(map(str, devices))}); put them on one")
        return devices.pop() if devices else torch.device("cpu")

    def specialization(self, args: tuple) -> Specialization:
        """The program compiled for the shapes and dtypes of ``args``, compiling it on first sight."""
        key = signature(args)
        if key not in self._specializations:
            self._specializations[key] = self.compiler.specialize(self.program, args)
        return self._specializations[key]

    def runner(self, device: torch.device):
        """The example inputs' specialisation loaded on ``device``."""
        return self._first.runner(device)

    def __call__(self, *args: torch.Tensor):
        device = self._check(args)
        outputs = self.specialization(args)(args, device)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


def _check_kinds(args: tuple) -> None:
    for position, arg in enumerate(args):
        if not isinstance(arg, (torch.Tensor, bool, int, float)):
            raise InputMismatchError(f"input {position} is a {type(arg).__name__}, not a tensor or a Python number")


def compile(program: Callable | torch.nn.Module, example_inputs: Sequence[torch.Tensor], **settings: Any) -> CompiledFunction:
    """Compile ``program`` for inputs shaped like ``example_inputs``.

    ``settings`` override the configuration (``schedule="generic"``, ``backend=...``).
    """
    return Compiler(**settings).compile(program, example_inputs)

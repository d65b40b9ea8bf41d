"""``lamina.compile``: from a PyTorch program and example inputs to a callable.

The compiled function checks every call against the inputs it was compiled for, then
runs on the backend that matches the inputs' device: CUDA tensors on the GPU, CPU
tensors on the Kernel IR simulator.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import torch

from lamina.core.config import Config, load_config
from lamina.core.errors import DeviceError, InputMismatchError, LaminaError
from lamina.core.pipeline import Compilation, Pipeline
from lamina.core.plugins import PluginManager, get_plugin_manager
from lamina.frontends.torch.capture import DEFAULT_KEEP, Captured, capture


class Compiler:
    """Compiles programs under one configuration (and its loaded plugins)."""

    def __init__(self, config: Config | None = None, **overrides: Any):
        self.config = config if config is not None else load_config(**overrides)
        self._plugins: PluginManager | None = None

    @property
    def plugins(self) -> PluginManager:
        if self._plugins is None:
            self._plugins = get_plugin_manager(self.config)
        return self._plugins

    def backend(self, name: str):
        entry = self.plugins.registry.get("backend", name)
        if entry is None:
            known = ", ".join(self.plugins.registry.names("backend"))
            raise LaminaError(f"unknown backend {name!r}; registered backends: {known}")
        return entry.provider

    def compile(self, program: Callable | torch.nn.Module, example_inputs: Sequence[torch.Tensor]) -> "CompiledFunction":
        example_inputs = tuple(example_inputs)
        started = time.perf_counter()
        keep = self.config.keep if self.config.keep is not None else DEFAULT_KEEP
        captured = capture(program, example_inputs, keep=keep)
        pipeline = Pipeline(self.config, self.plugins)
        target = pipeline.target(_visible_arch(example_inputs))
        compilation = pipeline.compile(captured.graph, target)
        return CompiledFunction(self, captured, compilation, example_inputs, time.perf_counter() - started)


def _visible_arch(inputs: Sequence[torch.Tensor]) -> str | None:
    device = next((t.device for t in inputs if isinstance(t, torch.Tensor) and t.is_cuda), None)
    if device is None:
        return None
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


def _describe(t: torch.Tensor) -> str:
    return f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)} on {t.device.type}"


class CompiledFunction:
    """A compiled program. Call it like the original; ``ir(level)`` prints any level."""

    def __init__(self, compiler: Compiler, captured: Captured, compilation: Compilation,
                 example_inputs: tuple, compile_seconds: float):
        self.compiler = compiler
        self.captured = captured
        self.compilation = compilation
        self.compile_seconds = compile_seconds
        self._signature = [(tuple(t.shape), t.dtype) for t in example_inputs]
        self._runners: dict[tuple[str, torch.device], Any] = {}

    def ir(self, level: str) -> str:
        return self.compilation.ir(level)

    @property
    def kernel_count(self) -> int:
        return len(self.compilation.kernels.kernels)

    def _check(self, args: tuple) -> torch.device:
        if len(args) != len(self._signature):
            raise InputMismatchError(
                f"this function was compiled for {len(self._signature)} inputs and was called with {len(args)}"
            )
        devices = set()
        for position, (arg, (shape, dtype)) in enumerate(zip(args, self._signature)):
            if not isinstance(arg, torch.Tensor):
                raise InputMismatchError(f"input {position} is a {type(arg).__name__}, not a tensor")
            if tuple(arg.shape) != shape or arg.dtype != dtype:
                want = f"{str(dtype).removeprefix('torch.')}{list(shape)}"
                raise InputMismatchError(
                    f"input {position} is {_describe(arg)}, but the function was compiled for {want}; "
                    "compile again with inputs of the new shape and dtype"
                )
            devices.add(arg.device)
        if len(devices) > 1:
            raise InputMismatchError(f"inputs are on several devices ({', '.join(map(str, devices))}); put them on one")
        return devices.pop() if devices else torch.device("cpu")

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

    def __call__(self, *args: torch.Tensor):
        device = self._check(args)
        inputs = []
        for position, name in zip(self.captured.user_input_positions, (i.name for i in self.compilation.graph.inputs)):
            tensor = args[position] if position is not None else self.captured.constants[name]
            if tensor.device != device:
                raise InputMismatchError(
                    f"{name} is on {tensor.device}, the inputs on {device}; move the module to {device}"
                )
            inputs.append(tensor.detach())
        outputs = self.runner(device)(*inputs)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


def compile(program: Callable | torch.nn.Module, example_inputs: Sequence[torch.Tensor], **settings: Any) -> CompiledFunction:
    """Compile ``program`` for inputs shaped like ``example_inputs``.

    ``settings`` override the configuration (``schedule="generic"``, ``backend=...``).
    """
    return Compiler(**settings).compile(program, example_inputs)

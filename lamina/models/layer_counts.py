"""Kernels per decoder layer: the same model counted at two depths, the difference divided.

A model of N layers launches ``outside + N * per_layer`` kernels, where ``outside`` is
the embedding, the final norm and the LM head (and whatever the layers share). Counting
the model at depth N and at a shallower depth ``a`` (1, or 0 for a one-layer model)
gives ``per_layer = (count(N) - count(a)) / (N - a)``: exact once every layer is
alike, fusions across a layer boundary included.
"""

from __future__ import annotations

from typing import Callable

import attrs
import torch

from lamina.models.builder import CausalLMLogits, truncated


@attrs.frozen
class LayerCounts:
    total: int
    layers: int
    per_layer: float
    #: The depth the model was also counted at.
    shallow_layers: int
    shallow_total: int

    @property
    def outside_layers(self) -> float:
        return self.total - self.layers * self.per_layer

    def describe(self) -> str:
        return (f"{self.total} in all, {self.per_layer:g} per decoder layer, {self.outside_layers:g} outside them "
                f"(per layer = (count with {_layers(self.layers)} - count with {_layers(self.shallow_layers)}) / "
                f"{self.layers - self.shallow_layers})")


def _layers(n: int) -> str:
    return f"{n} layer" if n == 1 else f"{n} layers"


def layer_counts(count: Callable[[CausalLMLogits], int], model: CausalLMLogits, total: int | None = None) -> LayerCounts:
    """``count(model)`` split into its decoder layers and the rest; ``total`` if already counted."""
    layers = model.num_layers
    total = count(model) if total is None else total
    shallow = 1 if layers >= 2 else 0
    with truncated(model, shallow) as shallow_model:
        shallow_total = count(shallow_model)
    per_layer = (total - shallow_total) / (layers - shallow) if layers > shallow else 0.0
    return LayerCounts(total=total, layers=layers, per_layer=per_layer, shallow_layers=shallow,
                       shallow_total=shallow_total)


def cuda_events(fn: Callable, inputs: tuple, calls: int, warmup: int = 1) -> list:
    """The PyTorch profiler's CUDA events (kernels, copies) of ``calls`` calls of ``fn(*inputs)``,
    after ``warmup`` calls, so that one-time work is not counted; gradients off."""
    with torch.no_grad():
        for _ in range(warmup):
            fn(*inputs)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
            for _ in range(calls):
                fn(*inputs)
            torch.cuda.synchronize()
    return [e for e in profile.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def cuda_kernels_per_call(fn: Callable, inputs: tuple[torch.Tensor, ...], calls: int = 3) -> int:
    """How many CUDA kernels one call of ``fn(*inputs)`` launches, by the PyTorch profiler."""
    kernels = [e for e in cuda_events(fn, inputs, calls) if not e.name.startswith(("Memcpy", "Memset"))]
    return round(len(kernels) / calls)

"""The whole-model suite as data (``lamina bench --models``): every architecture of the model
matrix, at batch 1 and 8, at each length it is benched at, in bfloat16 and in float32.

Big models are cut to a few layers so that a run fits its time: a case compiles each
contender two or three times, and a layer of Mistral-7B is as much work as a whole
GPT-2. Kernels per layer, counted at two depths, say what the published depth launches.
"""

from __future__ import annotations

from typing import Iterable, Mapping

import attrs
import torch

from lamina.bench.suite import SHORT
from lamina.core.errors import LaminaError
from lamina.models.architectures import (ARCHITECTURES, AUDIO, IMAGE, PADDED_TEXT, Architecture, build,
                                         example_inputs)

BATCHES = (1, 8)
DTYPES = (torch.bfloat16, torch.float32)
"""bfloat16 first: it is what users run, and the headline figure."""
BENCH_LAYERS = {"phi3": 4, "gemma": 4, "gemma2": 4, "mistral": 4, "qwen2": 4}
"""Layers built at real size where all of them would not fit a run; the other architectures are built whole."""


@attrs.frozen
class ModelCase:
    """One architecture at one batch, length and dtype, built with ``layers`` of its layers."""

    arch: Architecture
    batch: int
    length: int
    """Tokens; the image's side for ViT and the CNN; encoder positions for the Whisper encoder."""
    dtype: torch.dtype
    layers: int
    size: str = "real"
    """``small`` is CI's scaled-down configuration, which the tests run on the simulator."""

    @property
    def name(self) -> str:
        return f"{self.arch.name}.b{self.batch}.s{self.length}.{SHORT[self.dtype]}"

    @property
    def depth(self) -> str:
        return f"{self.layers} of {self.arch.layers(self.size)}"

    def build(self, *, device: str, seed: int, layers: int | None = None) -> torch.nn.Module:
        return build(self.arch, size=self.size, length=self.length, layers=layers or self.layers,
                     dtype=self.dtype, device=device, seed=seed)

    def inputs(self, model: torch.nn.Module, *, device: str, seed: int) -> dict[str, torch.Tensor]:
        return example_inputs(self.arch, model, batch=self.batch, length=self.length, device=device, seed=seed)

    def describe(self) -> str:
        """What the case builds and what it calls the model with."""
        b, s = self.batch, self.length
        if self.arch.inputs == IMAGE:
            called = f"pixel values {b}x3x{s}x{s}"
        elif self.arch.inputs == AUDIO:
            mels = self.arch.config_values(self.size)["num_mel_bins"]
            called = f"mel features {b}x{mels}x{2 * s} ({s} encoder positions)"
        elif self.arch.inputs == PADDED_TEXT:
            called = f"token ids {b}x{s}, attention mask with padded rows"
        else:
            called = f"token ids and attention mask {b}x{s}" + (", KV cache on" if self.arch.causal else "")
        return f"{self.arch.checkpoint} ({self.arch.model_class}), {str(self.dtype).removeprefix('torch.')}: {called}"


def bench_layers(overrides: Mapping[str, int] | None = None) -> dict[str, int]:
    """Layers to build per architecture: ``overrides``, else ``BENCH_LAYERS``, else all of them."""
    overrides = overrides or {}
    return {name: overrides.get(name, BENCH_LAYERS.get(name, arch.layers("real")))
            for name, arch in ARCHITECTURES.items()}


def parse_layer_overrides(items: Iterable[str]) -> dict[str, int]:
    """``["mistral=8"]`` as ``{"mistral": 8}``, each count checked against the architecture's depth."""
    found: dict[str, int] = {}
    for item in items:
        name, equals, count = (part.strip() for part in item.partition("="))
        if not equals or not count.isdigit():
            raise LaminaError(f"--layers {item!r}: write ARCH=N, e.g. --layers mistral=8")
        if name not in ARCHITECTURES:
            raise LaminaError(f"--layers {item!r}: unknown architecture {name!r}; the architectures are "
                              f"{', '.join(ARCHITECTURES)}")
        most = ARCHITECTURES[name].layers("real")
        if not 1 <= int(count) <= most:
            raise LaminaError(f"--layers {item!r}: {name} ({ARCHITECTURES[name].checkpoint}) has 1 to {most} layers")
        if name in found:
            raise LaminaError(f"--layers names {name} twice; give each architecture once")
        found[name] = int(count)
    return found


def model_cases(layers: Mapping[str, int] | None = None) -> list[ModelCase]:
    """Every case, by architecture, then dtype, batch and length; ``layers`` as ``bench_layers`` gives it."""
    layers = bench_layers() if layers is None else layers
    return [ModelCase(arch, batch, length, dtype, layers[arch.name])
            for arch in ARCHITECTURES.values() for dtype in DTYPES for batch in BATCHES for length in arch.lengths]

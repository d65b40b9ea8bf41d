"""Running a Torch IR graph through the whole compiler, with a registry chosen by the kit.

``lamina.compile`` starts from a Python program; the kit starts from a graph it wrote
itself (see ``op_graph``), with providers it chose (the plugin's own, whatever the
priorities), so it drives ``lamina.core.pipeline.Pipeline`` directly: the same stages,
verifiers and backends as a compile.
"""

from __future__ import annotations

from typing import Sequence

import torch

from lamina.core.config import Config
from lamina.core.errors import LaminaError
from lamina.core.ir import torch_ir
from lamina.core.pipeline import Compilation, Pipeline
from lamina.core.registry import Registry


class _Providers:
    """What the pipeline needs of a plugin manager: a registry, and observers (none here)."""

    def __init__(self, registry: Registry):
        self.registry = registry

    def observe(self, level, ir, compilation) -> None:
        return None

    def observed(self) -> bool:
        return False


def compile_graph(graph: torch_ir.Graph, registry: Registry, config: Config | None = None,
                  target: str = "sm_90") -> Compilation:
    config = config or Config()
    pipeline = Pipeline(config, _Providers(registry))
    return pipeline.compile(graph, pipeline.target(target))


def run_compiled(compilation: Compilation, registry: Registry, backend: str, inputs: Sequence[torch.Tensor],
                 device: str = "cpu") -> list[torch.Tensor]:
    entry = registry.get("backend", backend)
    if entry is None:
        raise LaminaError(f"no backend {backend!r} is registered; known: {', '.join(registry.names('backend'))}")
    reason = entry.provider.available()
    if reason is not None:
        raise LaminaError(f"the {backend} backend cannot run here: {reason}")
    runner = entry.provider.load(compilation, compilation.target)
    return list(runner(*(t.to(device) for t in inputs)))

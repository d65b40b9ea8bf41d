"""The reference backend: runs compiled programs on the CPU through the Kernel IR simulator.

It executes the very kernels that the CUDA backend would launch, with the same index
arithmetic, so a schedule can be checked (results, bounds, races, bank conflicts) on a
machine without a GPU. Any fault the simulator finds stops the run with a
``SimulationError``.
"""

from __future__ import annotations

from typing import Any

import torch

from lamina.backends.reference.simulator import simulate
from lamina.core.ir import kernel_ir
from lamina.core.target import Target
from lamina.runtime.program_runner import ProgramRunner


def launch(kernel: kernel_ir.Kernel, buffers: dict[str, torch.Tensor], sizes: dict[str, int]) -> None:
    simulate(kernel_ir.with_sizes(kernel, sizes), buffers, raise_on_fault=True)


class ReferenceBackend:
    name = "reference"

    def available(self) -> str | None:
        return None

    def emit(self, program: kernel_ir.Program, target: Target) -> None:
        return None

    def load(self, compilation: Any, target: Target) -> ProgramRunner:
        return ProgramRunner(compilation.loop, compilation.kernels, launch=launch, device=torch.device("cpu"), poison=True)

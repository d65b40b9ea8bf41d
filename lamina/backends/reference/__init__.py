"""The reference backend: CPU execution through the Tensor IR interpreter and the Kernel IR simulator."""

from lamina.backends.reference.backend import ReferenceBackend
from lamina.backends.reference.simulator import SimulationReport, simulate

__all__ = ["ReferenceBackend", "SimulationReport", "simulate"]

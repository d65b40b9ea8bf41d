"""The Kernel IR simulator: ``simulate`` runs a kernel's whole grid on the CPU and returns a
``SimulationReport`` of how it used memory.

``simulation`` runs the statements; ``grid``, ``expressions`` and ``memory`` hold the threads,
their values and the global and register arrays; ``shared`` and ``banks`` shared memory and its
bank conflicts; ``cp_async``, ``vectors``, ``mma`` and ``wgmma`` the copies, vector accesses and
tensor-core products; ``mbarriers`` and ``tma`` Hopper's barriers and tensor-memory copies, and
``tasks`` the roles of a block that wait on each other; ``report`` the faults found.
"""

from lamina.backends.reference.simulator.report import SimulationReport
from lamina.backends.reference.simulator.simulation import simulate

__all__ = ["SimulationReport", "simulate"]

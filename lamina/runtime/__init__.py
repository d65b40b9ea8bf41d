"""Running a compiled program: its memory plan, and the runner that launches its kernels in order."""

from lamina.runtime.memory_plan import MemoryPlan, plan_memory
from lamina.runtime.program_runner import ProgramRunner

__all__ = ["MemoryPlan", "ProgramRunner", "plan_memory"]

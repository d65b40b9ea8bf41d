"""The conformance suite for schedule plugins.

Each schedule the plugin registers is pinned (as ``schedule = "..."`` in the config
would) and every representative program is compiled with it; the kernels it applies
to run on the Kernel IR simulator, and are compiled by NVRTC for the target. For each
``schedule=S|program=P``:

- ``check=out_of_bounds``, ``misaligned``, ``unwritten_reads``, ``races``: what the
  simulator found in the kernels the schedule produced;
- ``check=numerics``: the program's results against PyTorch;
- ``check=threads``, ``shared_memory``: the launch within the target's limits;
- ``check=registers``: ptxas's report: registers within the target's, no spills.

A program none of whose kernels the schedule applies to is a skip, with that reason.
"""

from __future__ import annotations

import functools
from typing import ClassVar, Sequence

import attrs
import pytest
import torch

from lamina.backends.reference.simulator import simulate
from lamina.backends.reference.simulator import SimulationReport
from lamina.core.config import Config
from lamina.core.errors import LaminaError
from lamina.core.ir import kernel_ir
from lamina.core.pipeline import Compilation
from lamina.runtime.program_runner import ProgramRunner
from lamina.testing.check import Check, check_id
from lamina.testing.compiled_run import compile_graph
from lamina.testing.numerics import assert_close
from lamina.testing.op_graph import GraphSample
from lamina.testing.plugin_loading import focused_registry, provided
from lamina.testing.programs import PROGRAMS, build_program
from lamina.testing.suite import PluginSuite, SuiteContext, context_of

FAULTS = ("out_of_bounds", "misaligned", "unwritten_reads", "races")
LIMITS = ("threads", "shared_memory", "registers")
REGISTERS_PER_BLOCK = 64 * 1024


class SchedulePluginSuite(PluginSuite):
    """Checks a plugin that implements ``lamina_register_schedules``."""

    kind = "schedule"
    #: The schedules to check; by default every schedule the plugin registers.
    schedules: ClassVar[Sequence[str] | None] = None
    #: The representative programs to run them on (names of ``lamina.testing.programs.PROGRAMS``).
    programs: ClassVar[Sequence[str]] = tuple(PROGRAMS)

    @classmethod
    def plugin_checks(cls, context: SuiteContext) -> list[Check]:
        names = cls.schedules if cls.schedules is not None else provided(context.manager, context.name, "schedule")
        target = "sm_90" if "sm_90" in context.capabilities.targets else context.capabilities.targets[0]
        checks = []
        for schedule in names:
            for program in cls.programs:
                for check in FAULTS + ("numerics",) + LIMITS:
                    run = functools.partial(_check, cls, schedule, program, target, check)
                    checks.append(Check(check_id(schedule=schedule, program=program, check=check),
                                        f"schedule={schedule}", run))
        return checks


@attrs.frozen(eq=False)
class ScheduledRun:
    sample: GraphSample
    compilation: Compilation
    #: The Kernel IR kernels the schedule under test produced.
    kernels: tuple[kernel_ir.Kernel, ...]
    reports: dict[str, SimulationReport]
    outputs: tuple[torch.Tensor, ...]


@functools.cache
def _scheduled(suite: type[SchedulePluginSuite], schedule: str, program: str, target: str) -> ScheduledRun:
    context = context_of(suite)
    registry = focused_registry(context.manager, context.name, "schedule")
    sample = build_program(program)
    compilation = compile_graph(sample.graph, registry, Config(schedule=schedule), target)
    provider = registry.get("schedule", schedule).provider
    used = tuple(k for loop, k in zip(compilation.loop.kernels, compilation.kernels.kernels)
                 if provider.applies(loop, compilation.target))
    reports: dict[str, SimulationReport] = {}

    def launch(kernel: kernel_ir.Kernel, buffers: dict[str, torch.Tensor], sizes: dict[str, int]) -> None:
        reports[kernel.name] = simulate(kernel_ir.with_sizes(kernel, sizes), buffers, raise_on_fault=False)

    outputs = ProgramRunner(compilation.loop, compilation.kernels, launch, torch.device("cpu"), poison=True)(*sample.inputs)
    return ScheduledRun(sample, compilation, used, reports, tuple(outputs))


def _check(suite, schedule: str, program: str, target: str, check: str) -> None:
    run = _scheduled(suite, schedule, program, target)
    if not run.kernels:
        pytest.skip(f"schedule {schedule} applies to no kernel of program {program}")
    where = f"schedule {schedule} on program {program}"
    if check in FAULTS:
        found = [message for k in run.kernels for message in getattr(run.reports[k.name], check)]
        if found:
            raise AssertionError(f"{where}: the simulator found {check.replace('_', ' ')}:\n  " + "\n  ".join(found))
    elif check == "numerics":
        assert_close(run.outputs, run.sample.expected, where)
    elif check == "threads":
        limit = run.compilation.target.max_threads_per_block
        over = [f"{k.name}: {k.launch.threads_per_block}" for k in run.kernels if k.launch.threads_per_block > limit]
        assert not over, f"{where}: blocks of more than {limit} threads: {over}"
    elif check == "shared_memory":
        from lamina.backends.cuda.codegen import launch_shared_bytes

        limit = run.compilation.target.max_shared_bytes_optin
        over = [f"{k.name}: {launch_shared_bytes(k)} bytes" for k in run.kernels
                if max(k.shared_bytes, launch_shared_bytes(k)) > limit]
        assert not over, f"{where}: more shared memory per block than the {limit} bytes of {target}: {over}"
    else:
        _registers(run, target, where)


def _registers(run: ScheduledRun, target: str, where: str) -> None:
    from lamina.backends.cuda.codegen import emit_cuda, kernel_symbol
    from lamina.backends.cuda.nvrtc import compile_kernel, nvrtc_version
    from lamina.backends.cuda.wgmma import kernel_arch

    try:
        nvrtc_version()
    except LaminaError as error:
        pytest.skip(f"NVRTC is not available to read the register report: {error}")
    limit = run.compilation.target.registers_per_thread
    problems = []
    for kernel in run.kernels:
        arch = kernel_arch(kernel, run.compilation.target.arch)
        compiled = compile_kernel(emit_cuda(kernel), kernel_symbol(kernel), arch)
        threads = kernel.launch.threads_per_block
        if compiled.registers > limit:
            problems.append(f"{kernel.name} uses {compiled.registers} registers per thread, over {limit}")
        if compiled.registers * threads > REGISTERS_PER_BLOCK:
            problems.append(f"{kernel.name} needs {compiled.registers} x {threads} registers per block, "
                            f"over {REGISTERS_PER_BLOCK}: it could not launch")
        if compiled.spills:
            problems.append(f"{kernel.name} spills ({compiled.spill_stores} bytes stored, "
                            f"{compiled.spill_loads} loaded) with {compiled.registers} registers")
    assert not problems, f"{where} on {target}:\n  " + "\n  ".join(problems)

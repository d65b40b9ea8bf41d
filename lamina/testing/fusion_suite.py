"""The conformance suite for fusion rule plugins.

Every representative program is lowered to Loop IR unfused; then, for each
``rule=R|program=P``:

- ``check=alone``: the rule applied on its own until it changes nothing: every result
  verifies, and the fused program (run with the generic schedule on the Kernel IR
  simulator) computes what PyTorch computes;
- ``check=with_builtins``: the same with the plugin's rules among the built-in ones,
  in priority order, as a compile applies them.
"""

from __future__ import annotations

import functools
from typing import ClassVar, Sequence

import torch

from lamina.backends.reference.backend import launch
from lamina.core.ir import kernel_ir, loop_ir
from lamina.core.registry import Registry
from lamina.core.stages.decompose import decompose
from lamina.core.stages.fuse import fuse
from lamina.core.stages.lower_to_loops import lower_to_loops
from lamina.runtime.program_runner import ProgramRunner
from lamina.testing.check import Check, check_id
from lamina.testing.numerics import assert_close
from lamina.testing.op_graph import GraphSample
from lamina.testing.op_suite import decompositions
from lamina.testing.plugin_loading import provided
from lamina.testing.programs import PROGRAMS, build_program
from lamina.testing.suite import PluginSuite, SuiteContext, context_of


class FusionRulePluginSuite(PluginSuite):
    """Checks a plugin that implements ``lamina_register_fusion_rules``."""

    kind = "fusion_rule"
    #: The rules to check; by default every rule the plugin registers.
    rules: ClassVar[Sequence[str] | None] = None
    #: The representative programs to apply them to (names of ``lamina.testing.programs.PROGRAMS``).
    programs: ClassVar[Sequence[str]] = tuple(PROGRAMS)

    @classmethod
    def plugin_checks(cls, context: SuiteContext) -> list[Check]:
        names = cls.rules if cls.rules is not None else provided(context.manager, context.name, "fusion_rule")
        checks = []
        for rule in names:
            for program in cls.programs:
                for how in ("alone", "with_builtins"):
                    checks.append(Check(check_id(rule=rule, program=program, check=how), f"rule={rule}",
                                        functools.partial(_check, cls, rule, program, how)))
        return checks


def run_loop_program(program: loop_ir.Program, registry: Registry, sample: GraphSample) -> list[torch.Tensor]:
    """Run a Loop IR program with the generic schedule on the Kernel IR simulator."""
    generic = registry.get("schedule", "generic").provider
    target = registry.get("target", "sm_90").provider
    kernels = kernel_ir.Program([generic.lower(generic.schedule(k, target, {}), target) for k in program.kernels])
    return ProgramRunner(program, kernels, launch, torch.device("cpu"), poison=True)(*sample.inputs)


def _check(suite, rule: str, program: str, how: str) -> None:
    context = context_of(suite)
    registry = context.manager.registry
    sample = build_program(program)
    unfused = lower_to_loops(decompose(sample.graph, decompositions(registry)))
    if how == "alone":
        rules = [registry.get("fusion_rule", rule, plugin=context.name).provider]
    else:
        rules = [e.provider for e in registry.ranked("fusion_rule")]
    fused = fuse(unfused, rules, registry.get("target", "sm_90").provider, {})
    loop_ir.verify_program(fused)
    actual = run_loop_program(fused, registry, sample)
    assert_close(actual, sample.expected, f"program {program} fused by rule {rule} ({how.replace('_', ' ')})")

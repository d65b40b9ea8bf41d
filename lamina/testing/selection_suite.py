"""The conformance suite for selection policy plugins.

Each policy the plugin registers is selected (as ``selection = "..."`` in the config would)
and every representative program is compiled with it. For each ``policy=P|program=X``:

- ``check=chooses_a_candidate``: for every Loop IR kernel, offered the schedules that apply
  (in the registry's order, as the pipeline offers them), ``choose`` returns one of them;
  ``select``, where the policy offers it, returns a ``Selection`` of one of them, with only
  knobs that schedule declares and a note that is a str or None;
- ``check=deterministic``: asked twice, the policy answers the same (schedule and knobs);
- ``check=numerics``: the program compiled with the policy runs on the reference backend
  and matches PyTorch.

And ``policy=P|check=cache_key`` where the policy offers ``cache_key``: a str, the same for
the same configuration. Programs compile with an empty cache directory (or the suite's
``cache_dir``), so that what a user's cache holds (a tuning database) never changes a result.
"""

from __future__ import annotations

import functools
import tempfile
from typing import Any, ClassVar, Sequence

import attrs

from lamina.core.config import Config
from lamina.core.ir import loop_ir
from lamina.core.knobs import knob_names
from lamina.core.pipeline import Compilation, Pipeline
from lamina.core.registry import Registry
from lamina.core.selection import Selection, SelectionContext
from lamina.core.stages.lower_to_kernels import KernelLowering
from lamina.core.target import Target
from lamina.testing.check import Check, check_id
from lamina.testing.compiled_run import run_compiled
from lamina.testing.numerics import assert_close
from lamina.testing.op_graph import GraphSample
from lamina.testing.plugin_loading import focused_registry, provided
from lamina.testing.programs import PROGRAMS, build_program
from lamina.testing.suite import PluginSuite, SuiteContext, context_of

PROGRAM_CHECKS = ("chooses_a_candidate", "deterministic", "numerics")


class SelectionPolicySuite(PluginSuite):
    """Checks a plugin that implements ``lamina_register_selection_policies``."""

    kind = "selection_policy"
    #: The policies to check; by default every policy the plugin registers.
    policies: ClassVar[Sequence[str] | None] = None
    #: The representative programs to compile with them (names of ``lamina.testing.programs.PROGRAMS``).
    programs: ClassVar[Sequence[str]] = tuple(PROGRAMS)
    #: The cache directory the programs compile with, where a policy finds what it keeps (a
    #: tuning database); None: an empty temporary one.
    cache_dir: ClassVar[str | None] = None

    @classmethod
    def plugin_checks(cls, context: SuiteContext) -> list[Check]:
        names = cls.policies if cls.policies is not None else provided(context.manager, context.name, "selection_policy")
        checks = []
        for policy in names:
            subject = f"policy={policy}"
            entry = _registry(cls).get("selection_policy", policy)
            if entry is not None and callable(getattr(entry.provider, "cache_key", None)):
                checks.append(Check(check_id(policy=policy, check="cache_key"), subject,
                                    functools.partial(_cache_key, cls, policy)))
            for program in cls.programs:
                for check in PROGRAM_CHECKS:
                    checks.append(Check(check_id(policy=policy, program=program, check=check), subject,
                                        functools.partial(_check, cls, policy, program, check)))
        return checks


def candidates(registry: Registry, kernel: loop_ir.Kernel, target: Target) -> list[Any]:
    """The schedules the pipeline offers a policy for ``kernel``: those that apply, in the registry's order."""
    return Pipeline(Config(), _LoopRecorder(registry)).candidate_schedules(kernel, target)


@functools.cache
def _registry(suite: type[SelectionPolicySuite]) -> Registry:
    """Where each name the plugin registers is the plugin's own policy, whatever the priorities."""
    context = context_of(suite)
    return focused_registry(context.manager, context.name, "selection_policy")


@functools.cache
def _empty_cache_dir(suite: type[SelectionPolicySuite]) -> tempfile.TemporaryDirectory:
    """Kept for the process's life (removed when it ends): every check of the suite shares it."""
    return tempfile.TemporaryDirectory(prefix="lamina-selection-")


def config_for(suite: type[SelectionPolicySuite], policy: str) -> Config:
    """What the suite compiles with: the policy selected, in the suite's cache directory."""
    return Config(selection=policy, cache_dir=suite.cache_dir or _empty_cache_dir(suite).name)


def _provider(suite, policy: str) -> Any:
    entry = _registry(suite).get("selection_policy", policy)
    if entry is None:
        raise AssertionError(f"policy {policy} is not registered; known: "
                             f"{', '.join(_registry(suite).names('selection_policy'))}")
    return entry.provider


class _LoopRecorder:
    """The pipeline's view of the plugins: the suite's registry, and an observer that keeps the
    Loop IR, so that a policy whose answer stops the compile is still asked about every kernel."""

    def __init__(self, registry: Registry):
        self.registry = registry
        self.loop: loop_ir.Program | None = None

    def observe(self, level, ir, compilation) -> None:
        if level == "loop":
            self.loop = ir

    def observed(self) -> bool:
        return False


@attrs.frozen(eq=False)
class PolicyRun:
    """One program compiled with the policy: the Loop IR it was asked about, and the compilation
    or the error that stopped it."""

    sample: GraphSample
    config: Config
    target: Target
    loop: loop_ir.Program | None
    compilation: Compilation | None
    error: Exception | None


@functools.cache
def _compiled(suite: type[SelectionPolicySuite], policy: str, program: str) -> PolicyRun:
    context = context_of(suite)
    target = "sm_90" if "sm_90" in context.capabilities.targets else context.capabilities.targets[0]
    sample, config, recorder = build_program(program), config_for(suite, policy), _LoopRecorder(_registry(suite))
    pipeline = Pipeline(config, recorder)
    chosen_target = pipeline.target(target)
    try:
        compilation, error = pipeline.compile(sample.graph, chosen_target), None
    except Exception as e:  # noqa: BLE001 - numerics reports it; the other checks need only the Loop IR
        compilation, error = None, e
    return PolicyRun(sample, config, chosen_target, recorder.loop, compilation, error)


def _selection_context(run: PolicyRun, kernel: loop_ir.Kernel, registry: Registry) -> SelectionContext:
    """What the pipeline lends ``select``: ``build`` schedules and lowers as a compile would."""
    lowering = KernelLowering([e.provider for e in registry.ranked("kernel_pass")], run.target)

    def build(schedule, pins):
        tile = schedule.schedule(kernel, run.target, dict(pins))
        return tile, lowering.lower(schedule, tile)

    return SelectionContext(run.target, run.config, registry, build)


def _answers(suite, policy: str, run: PolicyRun, kernel: loop_ir.Kernel, offered: list[Any]) -> tuple[Any, Any]:
    """The policy's ``choose``, and its ``select`` (None where it offers none), each given its own list."""
    provider, registry = _provider(suite, policy), _registry(suite)
    chosen = provider.choose(kernel, list(offered), run.target)
    select = getattr(provider, "select", None)
    selection = select(kernel, list(offered), _selection_context(run, kernel, registry)) if select else None
    return chosen, selection


def _named(schedule: Any) -> str:
    name = getattr(schedule, "name", None)
    return f"schedule {name}" if isinstance(name, str) else repr(schedule)


def _pins(selection: Any) -> Any:
    """What a ``select`` answer decides: its schedule and knobs."""
    return (selection.schedule, selection.knobs) if isinstance(selection, Selection) else selection


def _selection_problems(selection: Any, offered: list[Any], names: str) -> list[str]:
    if not isinstance(selection, Selection):
        return [f"select returned {selection!r}, not a lamina.core.selection.Selection"]
    if selection.schedule not in offered:
        return [f"select chose {_named(selection.schedule)}, not one of {names}"]
    problems = []
    declared = knob_names(selection.schedule) or ()
    undeclared = [k for k, _ in selection.knobs if k not in declared]
    if undeclared:
        problems.append(f"select pins knobs {undeclared} that {selection.schedule.name} does not declare "
                        f"(its knob_names: {list(declared)})")
    if selection.note is not None and not isinstance(selection.note, str):
        problems.append(f"select's note is {selection.note!r}, not a str or None")
    return problems


def _check(suite, policy: str, program: str, check: str) -> None:
    run = _compiled(suite, policy, program)
    where = f"policy {policy} on program {program}"
    if check == "numerics":
        if run.error is not None:
            raise AssertionError(f"{where}: the compile failed: {type(run.error).__name__}: {run.error}") from run.error
        actual = run_compiled(run.compilation, _registry(suite), "reference", run.sample.inputs)
        assert_close(actual, run.sample.expected, where)
        return
    if run.loop is None:
        raise AssertionError(f"{where}: the program did not reach Loop IR: {run.error}") from run.error
    problems = []
    for kernel in run.loop.kernels:
        offered = candidates(_registry(suite), kernel, run.target)
        if not offered:  # the pipeline stops before asking the policy
            continue
        names = ", ".join(s.name for s in offered)
        first = _answers(suite, policy, run, kernel, offered)
        if check == "chooses_a_candidate":
            if first[0] not in offered:
                problems.append(f"{kernel.name}: choose returned {_named(first[0])}, not one of {names}")
            if first[1] is not None:
                problems += [f"{kernel.name}: {p}" for p in _selection_problems(first[1], offered, names)]
            continue
        second = _answers(suite, policy, run, kernel, offered)
        if first[0] != second[0]:
            problems.append(f"{kernel.name}: choose returned {_named(first[0])}, then {_named(second[0])}")
        if _pins(first[1]) != _pins(second[1]):
            problems.append(f"{kernel.name}: select chose {_pins(first[1])}, then {_pins(second[1])}")
    assert not problems, f"{where}:\n  " + "\n  ".join(problems)


def _cache_key(suite, policy: str) -> None:
    provider, config = _provider(suite, policy), config_for(suite, policy)
    first, second = provider.cache_key(config), provider.cache_key(attrs.evolve(config))
    assert isinstance(first, str), f"policy {policy}: cache_key returned {first!r}, not a str"
    assert first == second, f"policy {policy}: cache_key gave {first!r}, then {second!r} for the same configuration"

import attrs
import pytest

from lamina.backends.cuda.targets import SM90 as SM_90
from lamina.core.errors import LaminaError, VerificationError
from lamina.core.ir import loop_ir
from lamina.core.stages.fuse import fuse
from lamina.core.stages.lower_to_loops import lower_to_loops
from lamina.plugins.fusion import FuseEpilogueIntoReduction, InlinePointwiseProducers, RemoveDeadBuffers
from tests.core.stages import tensor_programs as tp


class Recorder:
    """Records the order in which the driver calls rules, and changes nothing."""

    def __init__(self, name, calls):
        self.name, self.priority, self.calls = name, 0, calls

    def apply(self, program, target, knobs):
        self.calls.append(self.name)
        return None


class Renamer:
    """Changes the program every time: a rule that never settles."""

    name, priority = "renamer", 0

    def apply(self, program, target, knobs):
        kernel = program.kernels[0]
        return attrs.evolve(program, kernels=(attrs.evolve(kernel, name=kernel.name + "x"),) + program.kernels[1:])


class Suffixer:
    """Adds a suffix to the first kernel's name where it has none."""

    name, priority = "suffixer", 1

    def apply(self, program, target, knobs):
        kernel = program.kernels[0]
        if kernel.name.endswith("_copy"):
            return None
        return attrs.evolve(program, kernels=(attrs.evolve(kernel, name=kernel.name + "_copy"),) + program.kernels[1:])


class Unsuffixer:
    """Takes the suffix off again: with ``Suffixer``, two rules that undo each other."""

    name, priority = "unsuffixer", 0

    def apply(self, program, target, knobs):
        kernel = program.kernels[0]
        if not kernel.name.endswith("_copy"):
            return None
        return attrs.evolve(program, kernels=(attrs.evolve(kernel, name=kernel.name[:-5]),) + program.kernels[1:])


class Breaker:
    """Drops every kernel's inputs: its result does not verify."""

    name, priority = "breaker", 0

    def apply(self, program, target, knobs):
        return attrs.evolve(program, kernels=tuple(attrs.evolve(k, inputs=()) for k in program.kernels))


class Wrong:
    name, priority = "wrong", 0

    def apply(self, program, target, knobs):
        return "not a program"


def test_no_rules_leave_the_program_as_it_is():
    program = lower_to_loops(tp.running_example())
    assert fuse(program, [], SM_90, {}) is program


def test_rules_run_in_the_given_order_until_none_applies():
    calls = []
    fuse(lower_to_loops(tp.mean()), [Recorder("first", calls), Recorder("second", calls)], SM_90, {})
    assert calls == ["first", "second"]


def test_a_change_restarts_from_the_first_rule():
    calls = []
    rules = [Recorder("first", calls), InlinePointwiseProducers(), Recorder("third", calls)]
    rules[1].apply = _recording(rules[1].apply, calls, "inline")
    fuse(lower_to_loops(tp.running_example()), rules, SM_90, {})
    assert calls == ["first", "inline", "first", "inline", "third"]


def _recording(apply, calls, name):
    def wrapped(program, target, knobs):
        calls.append(name)
        return apply(program, target, knobs)

    return wrapped


def test_a_rule_that_never_settles_is_named():
    with pytest.raises(LaminaError, match="rule 'renamer' changed the program"):
        fuse(lower_to_loops(tp.mean()), [Renamer()], SM_90, {})


def test_two_rules_that_undo_each_other_are_both_named():
    with pytest.raises(LaminaError, match=r"rules 'suffixer' \(\d+ times\) and 'unsuffixer' \(\d+ times\) undid each other"):
        fuse(lower_to_loops(tp.mean()), [Suffixer(), Unsuffixer()], SM_90, {})


def test_a_rule_that_breaks_the_program_is_named():
    with pytest.raises(VerificationError, match="after fusion rule 'breaker'"):
        fuse(lower_to_loops(tp.mean()), [Breaker()], SM_90, {})


def test_a_rule_that_returns_something_else_is_named():
    with pytest.raises(LaminaError, match="fusion rule 'wrong' returned str"):
        fuse(lower_to_loops(tp.mean()), [Wrong()], SM_90, {})


def test_epilogue_fusion_before_inlining_still_reaches_one_kernel():
    rules = [FuseEpilogueIntoReduction(), InlinePointwiseProducers(), RemoveDeadBuffers()]
    program = fuse(lower_to_loops(tp.running_example()), rules, SM_90, {})
    assert len(program.kernels) == 1
    assert loop_ir.format_kernel(program.kernels[0]).splitlines()[-1].strip() == "relu[i0, i1] = max(acc0, 0.0)"

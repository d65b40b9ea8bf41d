"""Loop IR fusion: apply the registered fusion rules until none changes the program.

Rules run in the order given (highest priority first); after any change the driver
starts again from the first rule, so that a rule of higher priority always sees the
program before one of lower priority does. Each change is verified, so that a rule
producing inconsistent Loop IR is named at once rather than surfacing later as a
wrong kernel.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Mapping, Sequence

from lamina.core.errors import LaminaError, SymbolicSizeError, VerificationError
from lamina.core.ir import loop_ir
from lamina.core.providers import FusionRule
from lamina.core.target import Target


def fuse(
    program: loop_ir.Program, rules: Sequence[FusionRule], target: Target, knobs: Mapping[str, Mapping[str, Any]],
    changed: Callable[[], None] = lambda: None,
) -> loop_ir.Program:
    """``program`` with ``rules`` applied, in order and repeatedly, until none applies, for
    ``target``; each rule receives its own pinned knobs from ``knobs``, by rule name (none
    where absent). ``changed`` hears each change (the progress line)."""
    limit = 8 * (len(program.kernels) + len(program.temporaries) + 1) * max(len(rules), 1)
    changes: Counter[str] = Counter()
    while True:
        for rule in rules:
            try:
                result = rule.apply(program, target, knobs.get(rule.name, {}))
            except SymbolicSizeError as error:
                raise SymbolicSizeError(f"fusion rule {rule.name!r}: {error}") from error
            if result is None or result == program:
                continue
            _check(rule, result, program)
            program = result
            changes[rule.name] += 1
            changed()
            break
        else:
            return program
        if sum(changes.values()) > limit:
            raise LaminaError(_did_not_settle(changes, limit, len(program.kernels)))


def _did_not_settle(changes: Counter[str], limit: int, kernels: int) -> str:
    """Names the rule that kept changing the program, or the rules that undid each other's changes."""
    (name, count), *rest = changes.most_common()
    undoing = [other for other, times in rest if times >= count // 2]
    if undoing:
        rules = " and ".join(f"{rule!r} ({changes[rule]} times)" for rule in [name, *undoing])
        return (f"fusion did not settle: rules {rules} undid each other's changes (of {limit} changes allowed "
                f"for {kernels} kernels). Disable the plugin that registers one of them, or fix the rules.")
    return (f"fusion did not settle: rule {name!r} changed the program {count} times (of {limit} changes "
            f"allowed for {kernels} kernels). A fusion rule must make the program smaller or leave it alone; "
            "disable the plugin that registers it, or fix the rule.")


def _check(rule: FusionRule, result: object, before: loop_ir.Program) -> None:
    if not isinstance(result, loop_ir.Program):
        raise LaminaError(
            f"fusion rule {rule.name!r} returned {type(result).__name__}, not a loop_ir.Program or None; fix the rule"
        )
    try:
        loop_ir.verify_program(result, unchanged_from=before)
    except VerificationError as error:
        raise VerificationError(f"after fusion rule {rule.name!r}: {error}") from error

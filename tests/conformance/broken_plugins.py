"""Deliberately broken plugins whose faults the conformance kit must report precisely, and a correct one."""

from __future__ import annotations

import attrs

from lamina.core.hookspecs import hookimpl
from lamina.core.ir import expr as ex, kernel_ir
from lamina.core.ir.tensor_ir import Arg
from lamina.plugins.ops.arguments import tensor
from lamina.plugins.schedules.generic.schedule import GenericSchedule


def exp_off_by_one_percent(b, node):
    return b.binary("mul", b.unary("exp", tensor(b, node)), 1.01)


def neg_with_unknown_scalar_op(b, node):
    x = tensor(b, node)
    return b.elementwise(ex.Op("mish", (Arg(0, b.dtype(x)),), b.dtype(x)), [x])


class BrokenOps:
    """Wrong numbers for exp; an unknown scalar op left in Tensor IR for neg."""

    @hookimpl
    def lamina_register_ops(self, register):
        register("aten.exp.default", exp_off_by_one_percent, priority=5)
        register("aten.neg.default", neg_with_unknown_scalar_op, priority=5)


def _unguarded(body: tuple) -> tuple:
    """The statements with every ``If`` replaced by its ``then`` branch: bounds checks gone."""
    found = []
    for s in body:
        if isinstance(s, kernel_ir.If):
            found.extend(_unguarded(s.then))
        elif isinstance(s, kernel_ir.For):
            found.append(attrs.evolve(s, body=_unguarded(s.body)))
        else:
            found.append(s)
    return tuple(found)


class UnguardedSchedule(GenericSchedule):
    """The generic schedule without its bounds checks: threads past the end read and write out of bounds."""

    name = "unguarded"

    def lower(self, tile, target):
        kernel = super().lower(tile, target)
        return attrs.evolve(kernel, body=_unguarded(kernel.body))


class UnguardedSchedules:
    @hookimpl
    def lamina_register_schedules(self, register):
        register(UnguardedSchedule())


class StatefulOps:
    """Registers one more op each time it is registered: it keeps state between registrations."""

    def __init__(self):
        self.calls = 0

    @hookimpl
    def lamina_register_ops(self, register):
        self.calls += 1
        for k in range(self.calls):
            register(f"aten.exp_{k}.default", exp_off_by_one_percent)


class CorrectExp:
    @hookimpl
    def lamina_register_ops(self, register):
        register("aten.exp.default", lambda b, node: b.unary("exp", tensor(b, node)), priority=5)


class MisspelledHook:
    @hookimpl
    def lamina_register_op(self, register):
        register("aten.exp.default", exp_off_by_one_percent)


BROKEN_OPS = BrokenOps()
UNGUARDED_SCHEDULES = UnguardedSchedules()
STATEFUL_OPS = StatefulOps()
MISSPELLED_HOOK = MisspelledHook()
CORRECT_EXP = CorrectExp()

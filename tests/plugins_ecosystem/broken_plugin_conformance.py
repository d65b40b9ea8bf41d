"""The conformance kit pointed at ``broken_plugin``; run by test_broken_plugin.py in its own pytest.

The file name does not start with ``test_``, so lamina's own test run never collects it.
"""

from lamina.core.hookspecs import hookimpl
from lamina.core.selection import Selection
from lamina.plugins.schedules.generic import GenericSchedule
from lamina.testing import Case, OpPluginSuite, SchedulePluginSuite, SelectionPolicySuite, T

from tests.plugins_ecosystem import broken_plugin

CASES = {
    "aten.expm1.default": [Case("ragged", (T((17, 33)),), compiled=True)],
    "aten.sign.default": [Case("ragged", (T((17, 33)),), compiled=True)],
}


class TestBrokenOps(OpPluginSuite):
    plugin = broken_plugin
    plugin_name = "broken"
    cases = CASES


class TestBrokenOpsWithKnownFailures(OpPluginSuite):
    plugin = broken_plugin
    plugin_name = "broken"
    cases = CASES
    known_failures = [
        "op=aten.expm1.default|dtype=f32|case=ragged",
        "op=aten.expm1.default|dtype=f32|case=ragged|via=simulator",
        "op=aten.sign.default|dtype=f32|case=ragged",
        "op=aten.sign.default|dtype=f32|case=ragged|via=simulator",
        "plugin=broken|check=registration_order_programs",
        "plugin=broken|check=hook_specs",
    ]


class TestBrokenSchedule(SchedulePluginSuite):
    plugin = broken_plugin
    plugin_name = "broken"
    programs = ("elementwise", "row_sum")


OWN_GENERIC = GenericSchedule()


class OwnGeneric:
    """Chooses a generic schedule it built itself, not the registered one it was offered: the
    programs still compute the right numbers, but the pipeline gets a schedule it never checked."""

    name = "own_generic"

    def choose(self, kernel, candidates, target):
        return OWN_GENERIC


class UndeclaredKnob:
    """Chooses a candidate, but its ``select`` pins a knob that no schedule declares, with a note that is no text."""

    name = "undeclared_knob"

    def choose(self, kernel, candidates, target):
        return candidates[0]

    def select(self, kernel, candidates, context):
        return Selection(candidates[0], {"no_such_knob": 1}, note=3)


class BrokenPolicies:
    @hookimpl
    def lamina_register_selection_policies(self, register):
        register(OwnGeneric())
        register(UndeclaredKnob())


class TestBrokenPolicies(SelectionPolicySuite):
    plugin = BrokenPolicies()
    plugin_name = "broken_policies"
    programs = ("elementwise", "matmul")

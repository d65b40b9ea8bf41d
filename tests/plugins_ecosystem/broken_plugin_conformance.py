"""The conformance kit pointed at ``broken_plugin``; run by test_broken_plugin.py in its own pytest.

The file name does not start with ``test_``, so lamina's own test run never collects it.
"""

from lamina.testing import Case, OpPluginSuite, SchedulePluginSuite, T

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

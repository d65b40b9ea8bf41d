"""The conformance kit for plugin authors.

Subclass the suite for your kind of plugin, set ``plugin``, and run
``pytest -p lamina.testing.conformance``::

    from lamina.testing import OpPluginSuite

    class TestMyOps(OpPluginSuite):
        plugin = my_package.plugin
"""

from lamina.testing.capabilities import Capabilities
from lamina.testing.cases import Case, OpCases, T, cases_for, register_cases, unary_cases
from lamina.testing.check import Check, check_id
from lamina.testing.backend_suite import BackendPluginSuite
from lamina.testing.fusion_suite import FusionRulePluginSuite
from lamina.testing.op_suite import OpPluginSuite
from lamina.testing.schedule_suite import SchedulePluginSuite
from lamina.testing.selection_suite import SelectionPolicySuite
from lamina.testing.suite import PluginSuite

__all__ = [
    "BackendPluginSuite", "Capabilities", "Case", "Check", "FusionRulePluginSuite", "OpCases", "OpPluginSuite",
    "PluginSuite", "SchedulePluginSuite", "SelectionPolicySuite", "T", "cases_for", "check_id", "register_cases",
    "unary_cases",
]

"""The built-in cost_model selection policy, checked by the conformance kit like any policy plugin."""

from lamina.plugins.selection import plugin as selection
from lamina.testing import SelectionPolicySuite


class TestCostModelPolicy(SelectionPolicySuite):
    plugin = selection

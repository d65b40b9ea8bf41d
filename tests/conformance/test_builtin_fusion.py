"""lamina's own fusion rules, checked by the conformance kit like any fusion rule plugin."""

from lamina.plugins.fusion import plugin
from lamina.testing import FusionRulePluginSuite


class TestBuiltinFusion(FusionRulePluginSuite):
    plugin = plugin

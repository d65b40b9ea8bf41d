"""The base of every conformance suite: the plugin under test, its capabilities, its known failures.

A suite's checks are data (``Check``), generated when pytest collects a subclass: the
``lamina.testing.conformance`` pytest plugin parametrizes ``test_conformance`` with them.
Checks added to lamina's suites therefore reach every subclass, with no change to it.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar, Sequence

import pytest

from lamina.core.plugins import PluginManager
from lamina.testing import loading_checks
from lamina.testing.capabilities import Capabilities, declared_capabilities
from lamina.testing.check import Check, check_id
from lamina.testing.plugin_loading import load, plugin_name


class SuiteContext:
    """What a suite's checks share: the plugin's name, capabilities, and its plugin manager, loaded once."""

    def __init__(self, suite: type["PluginSuite"]):
        self.suite = suite
        self.plugin = suite.plugin
        self.name = plugin_name(suite.plugin, suite.plugin_name)
        self.capabilities: Capabilities = declared_capabilities(suite, suite.plugin)
        self.subject = f"plugin={self.name}"

    @functools.cached_property
    def manager(self) -> PluginManager:
        return load(self.plugin, self.name)

    def loads(self) -> bool:
        try:
            self.manager
        except Exception:  # noqa: BLE001 - the hook_specs check reports it
            return False
        return True


class PluginSuite:
    """Subclass one of the suites of ``lamina.testing`` and set ``plugin``; run pytest with
    ``-p lamina.testing.conformance``."""

    #: The object or module registered under the entry-point group ``lamina.plugins``.
    plugin: ClassVar[Any] = None
    #: The name it registers under; by default its entry point's name, else its module's.
    plugin_name: ClassVar[str | None] = None
    #: What the plugin supports; by default the plugin's ``lamina_capabilities``, else f32 on sm_90.
    capabilities: ClassVar[Capabilities | None] = None
    #: Test ids expected to fail: run as strict xfail, so that a fix is noticed.
    known_failures: ClassVar[Sequence[str]] = ()
    #: The registry kind this suite checks (``op``, ``fusion_rule``, ``schedule``, ``backend``).
    kind: ClassVar[str] = ""

    @classmethod
    def conformance_checks(cls) -> list[Check]:
        """Every check of this suite for its plugin, in a stable order."""
        if cls.plugin is None:
            return []
        context = context_of(cls)
        checks = loading_checks.checks(context, cls.kind)
        if context.loads():
            checks += cls.plugin_checks(context)
        return checks + [_known_failures_check(context, [c.id for c in checks])]

    @classmethod
    def plugin_checks(cls, context: SuiteContext) -> list[Check]:
        """The checks of this kind of plugin; each suite defines its own."""
        return []

    @pytest.fixture
    def lamina_check(self) -> Check:
        pytest.fail("conformance suites run under the lamina pytest plugin: run pytest -p lamina.testing.conformance")

    def test_conformance(self, lamina_check: Check) -> None:
        lamina_check.run()


@functools.cache
def context_of(suite: type[PluginSuite]) -> SuiteContext:
    return SuiteContext(suite)


def _known_failures_check(context: SuiteContext, ids: list[str]) -> Check:
    def run() -> None:
        stale = [i for i in context.suite.known_failures if i not in ids]
        if stale:
            raise AssertionError(
                f"known_failures of {context.suite.__name__} lists {len(stale)} id(s) that no check has: "
                + ", ".join(stale) + "; remove them or correct their spelling (test ids are key=value|key=value)"
            )

    return Check(check_id(plugin=context.name, check="known_failures"), context.subject, run)

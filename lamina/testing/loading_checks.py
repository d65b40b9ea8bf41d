"""Checks every plugin passes, whatever it provides: it loads, validates, composes and leaves no state."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from lamina.core.config import Config
from lamina.core.errors import PluginError
from lamina.core.plugins import BUILTIN_PLUGINS, PluginManager
from lamina.testing.check import Check, check_id
from lamina.testing.plugin_loading import (
    builtin_name, installed_entry_point, load, provided, require_loaded, signature, without,
)

if TYPE_CHECKING:
    from lamina.testing.suite import SuiteContext


def checks(context: "SuiteContext", kind: str) -> list[Check]:
    def make(name: str, run, skip: str | None = None) -> Check:
        return Check(check_id(plugin=context.name, check=name), context.subject, run, skip=skip)

    return [
        make("entry_point", lambda: entry_point(context), skip=_entry_point_skip(context)),
        make("hook_specs", lambda: hook_specs(context)),
        make(f"registers_{kind}", lambda: registers(context, kind)),
        make("registration_order", lambda: registration_order(context)),
        make("no_leftover_state", lambda: no_leftover_state(context)),
    ]


def _entry_point_skip(context: "SuiteContext") -> str | None:
    if builtin_name(context.plugin) is not None or installed_entry_point(context.plugin) is not None:
        return None
    return (f"{context.name} is not installed as an entry point of the group lamina.plugins "
            "(pip install the package that declares it to check how it loads)")


def entry_point(context: "SuiteContext") -> None:
    """The plugin loads the way users get it: as a built-in, or from its installed entry point."""
    own = builtin_name(context.plugin)
    if own is not None:
        assert own in BUILTIN_PLUGINS
        require_loaded(PluginManager(Config(strict_plugins=True), entry_points=lambda: []), own)
        return
    ep = installed_entry_point(context.plugin)
    if ep is None:
        pytest.skip(_entry_point_skip(context))
    manager = PluginManager(Config(plugins=(ep.name,), strict_plugins=True))
    require_loaded(manager, ep.name)
    if ep.name != context.name:
        raise AssertionError(f"the entry point is named {ep.name!r} but the suite checks {context.name!r}; "
                             "drop plugin_name from the suite or make them agree")


def hook_specs(context: "SuiteContext") -> None:
    """Loading validates every hook implementation against lamina's hook specs (strictly)."""
    try:
        context.manager
    except PluginError as error:
        raise AssertionError(f"{context.name} does not load: {error}") from None


def registers(context: "SuiteContext", kind: str) -> None:
    if not provided(context.manager, context.name, kind):
        raise AssertionError(f"{context.name} registers no {kind}: does it implement the registration hook "
                             f"for it, and does that call register(...)?")


def registration_order(context: "SuiteContext") -> None:
    """Loaded before or after the built-ins, the plugin registers the same providers and wins the same names."""
    after = load(context.plugin, context.name)
    before = load(context.plugin, context.name, first=True)
    if signature(after.registry) != signature(before.registry):
        difference = sorted(set(signature(after.registry)) ^ set(signature(before.registry)))
        raise AssertionError(f"what is registered depends on whether {context.name} loads before or after the "
                             f"built-ins: {difference[:5]}; a plugin must not depend on what others registered")
    for kind in ("op", "fusion_rule", "schedule", "kernel_pass", "backend", "target", "selection_policy"):
        for name in after.registry.names(kind):
            a, b = after.registry.get(kind, name), before.registry.get(kind, name)
            if (a.plugin, a.priority) != (b.plugin, b.priority):
                raise AssertionError(f"the {kind} {name} comes from {a.plugin} when {context.name} loads last, "
                                     f"from {b.plugin} when it loads first")


def no_leftover_state(context: "SuiteContext") -> None:
    """Unregistering the plugin leaves the registry as the other plugins alone make it, and
    registering it again registers exactly what it did the first time."""
    manager = load(context.plugin, context.name)
    first = signature(manager.registry, context.name)
    manager.registry.remove_plugin(context.name)
    manager.pm.unregister(name=context.name)
    alone = signature(without(context.name).registry)
    if signature(manager.registry) != alone:
        raise AssertionError(f"after unregistering {context.name} the registry still differs from one without it: "
                             f"{sorted(set(signature(manager.registry)) ^ set(alone))[:5]}")
    left = [caller.name for caller in manager.pm.hook.__dict__.values()
            if hasattr(caller, "get_hookimpls") and any(i.plugin_name == context.name for i in caller.get_hookimpls())]
    if left:
        raise AssertionError(f"hooks of {context.name} are still registered after unregistering it: {left}")
    again = signature(load(context.plugin, context.name).registry, context.name)
    if again != first:
        raise AssertionError(f"registering {context.name} a second time registers something else: "
                             f"{sorted(set(first) ^ set(again))[:5]}; the plugin keeps state between registrations")

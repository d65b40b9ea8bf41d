"""Load a plugin under test the way lamina loads any plugin, in either order around the built-ins.

The plugin goes through ``lamina.core.plugins.PluginManager`` as an entry point would
(version check, hook-spec validation, registration), strictly, so that any fault is an
error naming the plugin. Only the built-ins and the plugin under test are loaded:
other installed plugins never change what the kit sees.
"""

from __future__ import annotations

import importlib
import types
from importlib import metadata
from typing import Any

from lamina.core.config import Config
from lamina.core.errors import PluginError
from lamina.core.plugins import BUILTIN_PLUGINS, ENTRY_POINT_GROUP, PluginInfo, PluginManager
from lamina.core.registry import Registry
from lamina.core.version import __version__


def plugin_module(plugin: Any) -> str:
    if isinstance(plugin, types.ModuleType):
        return plugin.__name__
    return f"{type(plugin).__module__}:{type(plugin).__qualname__}"


def builtin_name(plugin: Any) -> str | None:
    """The built-in name of ``plugin`` when it is one of lamina's own plugin modules."""
    if isinstance(plugin, types.ModuleType):
        for name, module in BUILTIN_PLUGINS.items():
            if module == plugin.__name__:
                return name
    return None


def installed_entry_point(plugin: Any):
    """The ``lamina.plugins`` entry point that loads ``plugin`` itself, or None.

    Only entry points naming the plugin's module are loaded, so that looking does not
    import every installed plugin.
    """
    module = plugin.__name__ if isinstance(plugin, types.ModuleType) else type(plugin).__module__
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.value.split(":")[0] != module:
            continue
        try:
            loaded = ep.load()
        except Exception:  # noqa: BLE001 - the entry point check loads it again and reports why
            continue
        if loaded is plugin:
            return ep
    return None


def plugin_name(plugin: Any, declared: str | None = None) -> str:
    """The name the plugin registers under: declared, built-in, installed entry point, or its module."""
    if declared:
        return declared
    builtin = builtin_name(plugin)
    if builtin:
        return builtin
    ep = installed_entry_point(plugin)
    if ep is not None:
        return ep.name
    return plugin_module(plugin)


class OrderedManager(PluginManager):
    """Loads the built-ins and the plugin under test in the order given, instead of built-ins first."""

    def __init__(self, config: Config, order: list[tuple[PluginInfo, Any]]):
        self._order = order
        super().__init__(config, entry_points=lambda: [])

    def _load(self) -> None:
        for info, load in self._order:
            self._add(info, load)


def _builtin(name: str, module: str) -> tuple[PluginInfo, Any]:
    info = PluginInfo(name=name, module=module, distribution="lamina", version=__version__, builtin=True)
    return info, lambda: importlib.import_module(module)


def load(plugin: Any, name: str, *, first: bool = False) -> PluginManager:
    """A plugin manager holding the built-ins and ``plugin``: after them, or before them when ``first``.

    Strict: raises ``PluginError`` when the plugin fails to load, validate or register.
    """
    config = Config(strict_plugins=True)
    own = builtin_name(plugin)
    builtins = [_builtin(n, m) for n, m in BUILTIN_PLUGINS.items() if n != own]
    if own is not None:
        under_test = _builtin(own, BUILTIN_PLUGINS[own])
    else:
        under_test = (PluginInfo(name=name, module=plugin_module(plugin)), lambda: plugin)
    order = [under_test] + builtins if first else builtins + [under_test]
    return OrderedManager(config, order)


def without(name: str) -> PluginManager:
    """The built-ins alone, less ``name`` if it is one of them (another name needs no disabling,
    and a strict configuration refuses to disable a plugin it does not have)."""
    disable = (name,) if name in BUILTIN_PLUGINS else ()
    return PluginManager(Config(strict_plugins=True, disable=disable), entry_points=lambda: [])


def signature(registry: Registry, plugin: str | None = None) -> list[tuple]:
    """What a registry holds, comparable between two loads: kind, name, plugin, priority, provider type."""
    found = []
    for entry in registry.entries():
        if plugin is None or entry.plugin == plugin:
            provider = entry.provider
            made_by = getattr(provider, "__qualname__", None) or type(provider).__qualname__
            found.append((entry.kind, entry.name, entry.plugin, entry.priority, made_by))
    return sorted(found)


def provided(manager: PluginManager, name: str, kind: str) -> list[str]:
    """The names of everything of ``kind`` that plugin ``name`` registered."""
    return sorted({e.name for e in manager.registry.entries() if e.kind == kind and e.plugin == name})


def focused_registry(manager: PluginManager, name: str, kind: str) -> Registry:
    """The manager's registry where, for every name of ``kind`` that plugin ``name`` provides,
    only its own provider remains: what the kit runs is the plugin's, whatever the priorities."""
    own = set(provided(manager, name, kind))
    registry = Registry()
    for e in manager.registry.entries():
        if e.kind == kind and e.name in own and e.plugin != name:
            continue
        registry.add(e.kind, e.name, e.provider, e.plugin, e.priority)
    return registry


def require_loaded(manager: PluginManager, name: str) -> None:
    for info in manager.plugins:
        if info.name == name and info.status != "loaded":
            raise PluginError(f"plugin {name} did not load: {info.status}: {info.error}")

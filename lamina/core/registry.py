"""Named providers for each stage, and the deterministic order in which they are chosen.

Plugins fill the registry through the registration hooks. Each provider is stored
with the plugin that registered it. Ordering never depends on the order in which
plugins were loaded: providers are ranked by priority (higher first), then by name,
then by plugin name.
"""

from __future__ import annotations

import warnings
from typing import Any, Iterable

import attrs

from lamina.core.errors import PluginError

KINDS = ("op", "fusion_rule", "schedule", "kernel_pass", "backend", "target", "selection_policy")


@attrs.frozen
class Entry:
    kind: str
    name: str
    provider: Any
    plugin: str
    priority: int = 0


def _rank(entry: Entry):
    return (-entry.priority, entry.name, entry.plugin)


class Registry:
    def __init__(self) -> None:
        self._entries: dict[str, dict[str, list[Entry]]] = {kind: {} for kind in KINDS}

    def add(self, kind: str, name: str, provider: Any, plugin: str, priority: int = 0) -> None:
        if kind not in self._entries:
            raise PluginError(f"plugin {plugin} registered an unknown kind {kind!r}")
        if not isinstance(name, str) or not name:
            raise PluginError(f"plugin {plugin} registered a {kind} without a name")
        if not isinstance(priority, int):
            raise PluginError(f"plugin {plugin}: the priority of {kind} {name} must be an int")
        same = self._entries[kind].setdefault(name, [])
        if kind != "op" and any(e.plugin == plugin for e in same):
            raise PluginError(f"plugin {plugin} registered the {kind} {name!r} twice")
        same.append(Entry(kind, name, provider, plugin, priority))
        same.sort(key=_rank)

    def remove_plugin(self, plugin: str) -> None:
        """Forget everything ``plugin`` registered."""
        for by_name in self._entries.values():
            for name in list(by_name):
                by_name[name] = [e for e in by_name[name] if e.plugin != plugin]
                if not by_name[name]:
                    del by_name[name]

    def names(self, kind: str) -> list[str]:
        return sorted(self._entries[kind])

    def candidates(self, kind: str, name: str) -> list[Entry]:
        """Every provider registered under ``name``, best first."""
        return list(self._entries[kind].get(name, []))

    def get(self, kind: str, name: str, plugin: str | None = None) -> Entry | None:
        """The winning provider for ``name`` (or the one from ``plugin``); a provider renamed
        from ``name`` (its ``former_names``) where none has that name, with a warning."""
        for entry in self._entries[kind].get(name, []):
            if plugin is None or entry.plugin == plugin:
                return entry
        if name not in self._entries[kind]:
            return self._renamed(kind, name, plugin)
        return None

    def _renamed(self, kind: str, name: str, plugin: str | None) -> Entry | None:
        for entry in self.ranked(kind):
            if name in getattr(entry.provider, "former_names", ()) and plugin in (None, entry.plugin):
                warnings.warn(f"the {kind} {name!r} is now {entry.name!r}; the old name will be refused in the next "
                              "release", FutureWarning, stacklevel=3)
                return entry
        return None

    def ranked(self, kind: str) -> list[Entry]:
        """The winning provider of every name of ``kind``, best first."""
        return sorted((entries[0] for entries in self._entries[kind].values()), key=_rank)

    def entries(self) -> Iterable[Entry]:
        for by_name in self._entries.values():
            for entries in by_name.values():
                yield from entries

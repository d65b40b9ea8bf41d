"""``lamina plugins``: every plugin, its version, its hooks and what it registered, then
which provider each stage will use under the current configuration.

``--json`` prints the plugin list for machines; ``--stages`` prints only the stage
view (as JSON with ``--json``).
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from lamina.core.config import Config, load_config
from lamina.core.plugins import CONTRIB_PLUGINS, PluginManager, get_plugin_manager
from lamina.core.registry import Entry

_PLURAL = {"fusion_rule": "fusion rules", "kernel_pass": "kernel passes", "selection_policy": "selection policies"}


def plugins_command(args) -> int:
    config = load_config()
    manager = get_plugin_manager(config)
    if args.json:
        document = stage_view(manager, config) if args.stages else [attrs.asdict(p) for p in manager.plugins]
        print(json.dumps(document, indent=2))
        return 0
    if not args.stages:
        _print_plugins(manager)
        print()
    print("\n".join(format_stage_view(stage_view(manager, config))))
    return 0


def _print_plugins(manager: PluginManager) -> None:
    for p in manager.plugins:
        origin = "built-in" if p.builtin else (p.distribution or "unknown distribution")
        print(f"{p.name}  {p.version or ''}  ({origin})  [{p.status}]")
        print(f"  module: {p.module}")
        if p.status == "off":
            print(f"  opt-in: loaded where the configuration says selection = {CONTRIB_PLUGINS[p.name][1]!r}")
        if p.error:
            print(f"  error: {p.error}")
        if p.hooks:
            print(f"  hooks: {', '.join(p.hooks)}")
        by_kind: dict[str, list[str]] = {}
        for kind, name in p.registered:
            by_kind.setdefault(kind, []).append(name)
        for kind, names in by_kind.items():
            print(f"  {_PLURAL.get(kind, kind + 's')}: {', '.join(names)}")


# --- which provider each stage will use ----------------------------------------


def _provider(entry: Entry, manager: PluginManager) -> dict[str, Any]:
    """One provider: its name, plugin and priority, and the plugins whose providers of that name it beats."""
    beaten = [e.plugin for e in manager.registry.candidates(entry.kind, entry.name)[1:]]
    found = {"name": entry.name, "plugin": entry.plugin, "priority": entry.priority}
    if beaten:
        found["overrides"] = beaten
    return found


def _ranked(kind: str, manager: PluginManager) -> list[dict[str, Any]]:
    return [_provider(e, manager) for e in manager.registry.ranked(kind)]


def _visible_arch() -> str | None:
    import torch

    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def _target(config: Config, manager: PluginManager) -> dict[str, Any]:
    arch = None if config.target else _visible_arch()
    name = config.target or arch or "sm_90"
    why = "configured" if config.target else ("the visible GPU" if arch else "no GPU is visible: the default")
    entry = manager.registry.get("target", name)
    return {"name": name, "why": why, "registered": entry is not None,
            "plugin": entry.plugin if entry else None, "known": manager.registry.names("target")}


def _backends(config: Config, manager: PluginManager) -> dict[str, Any]:
    found = []
    for entry in manager.registry.ranked("backend"):
        try:
            reason = entry.provider.available()
        except Exception as error:  # a plugin's backend must not stop the listing
            reason = f"available() failed: {type(error).__name__}: {error}"
        found.append({**_provider(entry, manager), "available": reason is None, "why_not": reason})
    return {"configured": config.backend, "providers": found}


def stage_view(manager: PluginManager, config: Config | None = None) -> dict[str, Any]:
    """Which provider each stage of a compile will use under ``config`` (by default ``manager``'s,
    which, shared between configurations of the same plugins, may be another's)."""
    config, registry = config or manager.config, manager.registry
    ops = [registry.get("op", name) for name in registry.names("op")]
    by_plugin: dict[str, int] = {}
    for entry in ops:
        by_plugin[entry.plugin] = by_plugin.get(entry.plugin, 0) + 1
    policy = registry.get("selection_policy", config.selection)
    return {
        "config": {
            "source": config.source,
            "plugins": list(config.plugins) if config.plugins is not None else None,
            "disable": list(config.disable),
            "strict_plugins": config.strict_plugins,
        },
        "ops": {
            "count": len(ops),
            "by_plugin": dict(sorted(by_plugin.items())),
            "overridden": [_provider(e, manager) for e in ops if len(registry.candidates("op", e.name)) > 1],
        },
        "fusion_rules": _ranked("fusion_rule", manager),
        "schedules": {
            "configured": config.schedule,
            "configured_registered": None if config.schedule is None else registry.get("schedule", config.schedule) is not None,
            "providers": _ranked("schedule", manager),
        },
        "selection_policy": {"name": config.selection, "plugin": policy.plugin if policy else None,
                             "registered": policy is not None},
        "kernel_passes": _ranked("kernel_pass", manager),
        "backends": _backends(config, manager),
        "target": _target(config, manager),
    }


def _line(p: dict[str, Any]) -> str:
    text = f"{p['name']}  ({p['plugin']}, priority {p['priority']})"
    if p.get("overrides"):
        text += f", over {', '.join(p['overrides'])}"
    return text


def format_stage_view(view: dict[str, Any]) -> list[str]:
    """The stage view as the lines ``lamina plugins`` prints."""
    cfg = view["config"]
    lines = [f"Stages under the current configuration ({cfg['source'] or 'no config file; defaults and LAMINA_* variables'}):"]
    if cfg["plugins"] is not None:
        lines.append(f"  allowed third-party plugins: {', '.join(cfg['plugins']) or 'none'}")
    if cfg["disable"]:
        lines.append(f"  disabled plugins: {', '.join(cfg['disable'])}")

    ops = view["ops"]
    counts = ", ".join(f"{n} from {plugin}" for plugin, n in ops["by_plugin"].items())
    lines.append(f"  ops: {ops['count']} decompositions ({counts or 'none'})")
    for p in ops["overridden"]:
        lines.append(f"    {p['name']}: {p['plugin']} wins over {', '.join(p['overrides'])}")

    lines.append("  fusion rules, in the order they are tried:")
    lines += [f"    {k}. {_line(p)}" for k, p in enumerate(view["fusion_rules"], 1)] or ["    none"]

    schedules = view["schedules"]
    lines.append("  schedules, best priority first:")
    lines += [f"    {_line(p)}" for p in schedules["providers"]] or ["    none"]
    if schedules["configured"] is None:
        lines.append("    configured: none; the selection policy chooses among those that apply")
    else:
        missing = "" if schedules["configured_registered"] else "  (NOT REGISTERED: compiles will fail)"
        lines.append(f"    configured: {schedules['configured']}, wherever it applies{missing}")

    policy = view["selection_policy"]
    where = f"({policy['plugin']})" if policy["registered"] else "(NOT REGISTERED: compiles will fail)"
    lines.append(f"  selection policy: {policy['name']}  {where}")

    lines.append("  kernel passes, in order:")
    lines += [f"    {k}. {_line(p)}" for k, p in enumerate(view["kernel_passes"], 1)] or ["    none"]

    backends = view["backends"]
    configured = backends["configured"] or "none; cuda for CUDA tensors, reference for CPU tensors"
    lines.append(f"  backends (configured: {configured}):")
    for p in backends["providers"]:
        state = "available" if p["available"] else f"unavailable: {p['why_not']}"
        lines.append(f"    {_line(p)}  [{state}]")

    target = view["target"]
    known = "" if target["registered"] else f"  (NOT REGISTERED; known: {', '.join(target['known']) or 'none'})"
    lines.append(f"  target: {target['name']} ({target['why']}){known}")
    return lines

"""``lamina plugins``: every plugin, its version, its hooks and what it registered."""

from __future__ import annotations

import json

import attrs

from lamina.core.config import load_config
from lamina.core.plugins import get_plugin_manager


_PLURAL = {"fusion_rule": "fusion rules", "kernel_pass": "kernel passes", "selection_policy": "selection policies"}


def plugins_command(args) -> int:
    config = load_config()
    manager = get_plugin_manager(config)
    if args.json:
        print(json.dumps([attrs.asdict(p) for p in manager.plugins], indent=2))
        return 0
    for p in manager.plugins:
        origin = "built-in" if p.builtin else (p.distribution or "unknown distribution")
        print(f"{p.name}  {p.version or ''}  ({origin})  [{p.status}]")
        print(f"  module: {p.module}")
        if p.error:
            print(f"  error: {p.error}")
        if p.hooks:
            print(f"  hooks: {', '.join(p.hooks)}")
        by_kind: dict[str, list[str]] = {}
        for kind, name in p.registered:
            by_kind.setdefault(kind, []).append(name)
        for kind, names in by_kind.items():
            print(f"  {_PLURAL.get(kind, kind + 's')}: {', '.join(names)}")
    return 0

"""Temporary installed distributions with ``lamina.plugins`` entry points, for plugin tests."""

from __future__ import annotations

import textwrap
from pathlib import Path


def install_plugin(site: Path, dist: str, entry_name: str, module: str, source: str, version: str = "1.0") -> None:
    """Write ``module`` and a dist-info for ``dist`` declaring it under ``lamina.plugins``.

    ``site`` must be on sys.path for importlib.metadata to find it.
    """
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[lamina.plugins]\n{entry_name} = {module}\n")



def fusion_rule_plugin(rule: str) -> str:
    """A plugin's source that registers a fusion rule named ``rule`` that changes nothing."""
    return f"""
    from lamina.core.hookspecs import hookimpl

    class Rule:
        name = "{rule}"
        priority = 5
        def apply(self, program, target, knobs):
            return None

    @hookimpl
    def lamina_register_fusion_rules(register):
        register(Rule())
"""

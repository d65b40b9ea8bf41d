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

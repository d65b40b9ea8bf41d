"""The example plugin packages of examples/plugins/, made installed for a test.

Where a package is really installed (CI pip-installs them), it is used as it is;
otherwise its src/ folder goes on sys.path and a dist-info declaring the entry
point of its pyproject.toml is written next to it, which is what pip would do.
"""

from __future__ import annotations

import sys
import tomllib
from importlib import metadata
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "plugins"
PACKAGES = ("lamina-extra-ops", "lamina-strided-schedule")


def project(package: str) -> dict:
    with (EXAMPLES / package / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["project"]


def entry_points(package: str) -> dict[str, str]:
    return dict(project(package)["entry-points"]["lamina.plugins"])


def installed(package: str) -> bool:
    try:
        metadata.distribution(package)
    except metadata.PackageNotFoundError:
        return False
    return True


def install(site: Path, package: str, monkeypatch) -> None:
    """Make ``package`` importable and its entry points visible, unless it is installed already."""
    if installed(package):
        return
    monkeypatch.syspath_prepend(str(EXAMPLES / package / "src"))
    monkeypatch.syspath_prepend(str(site))
    meta = project(package)
    info = site / f"{package.replace('-', '_')}-{meta['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: {meta['version']}\n")
    lines = [f"{name} = {value}" for name, value in entry_points(package).items()]
    (info / "entry_points.txt").write_text("[lamina.plugins]\n" + "\n".join(lines) + "\n")


def forget_modules() -> None:
    for name in list(sys.modules):
        if name.startswith(("lamina_extra_ops", "lamina_strided_schedule")):
            del sys.modules[name]

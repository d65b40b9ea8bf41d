"""docs/plugins.md: its Python blocks run, in order, in one namespace, and it covers every hook and provider."""

import re
from pathlib import Path

import pytest

from lamina.core import hookspecs, providers
from lamina.core.plugins import reset_plugin_managers

DOC = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def python_blocks() -> list[str]:
    return BLOCK.findall(DOC.read_text())


def test_the_guide_has_code_to_run():
    assert len(python_blocks()) >= 10


def test_every_python_block_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for var in ("LAMINA_SCHEDULE", "LAMINA_PLUGINS", "LAMINA_DISABLE_PLUGINS", "LAMINA_KEEP", "LAMINA_TARGET"):
        monkeypatch.delenv(var, raising=False)
    reset_plugin_managers()
    namespace = {"__name__": "plugins_doc"}
    for number, block in enumerate(python_blocks(), 1):
        line = DOC.read_text().count("\n", 0, DOC.read_text().index(block)) + 1
        try:
            exec(compile(block, f"{DOC}:block {number} (line {line})", "exec"), namespace)
        except Exception as error:
            pytest.fail(f"docs/plugins.md, Python block {number} at line {line} fails: {type(error).__name__}: {error}")
    reset_plugin_managers()


@pytest.mark.parametrize("hook", sorted(n for n in vars(hookspecs) if n.startswith("lamina_")))
def test_every_hook_is_documented(hook):
    assert f"`{hook}(" in DOC.read_text(), f"docs/plugins.md does not describe the hook {hook}"


@pytest.mark.parametrize("protocol", ["Decomposition", "FusionRule", "Schedule", "KernelPass", "SelectionPolicy", "Backend"])
def test_every_provider_protocol_is_documented(protocol):
    assert hasattr(providers, protocol)
    assert f"**{protocol}**" in DOC.read_text(), f"docs/plugins.md does not describe {protocol}"

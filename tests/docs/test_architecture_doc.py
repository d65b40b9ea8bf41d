"""docs/architecture.md shows the levels exactly as lamina prints them."""

import importlib.util
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def load_renderer():
    spec = importlib.util.spec_from_file_location("render_architecture", DOCS / "render_architecture.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_documented_level_matches_the_printed_one():
    renderer = load_renderer()
    documented = renderer.documented_levels((DOCS / "architecture.md").read_text())
    printed = renderer.printed_levels()
    assert sorted(documented) == sorted(printed)
    for level, text in printed.items():
        assert documented[level] == text, f"docs/architecture.md is stale at level {level}: run python docs/render_architecture.py"

"""Regenerate the printed levels in architecture.md: ``python docs/render_architecture.py`` (lamina installed).

The prose stays as written; only the blocks after ``<!-- level: NAME -->`` markers change.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

LEVEL_BLOCK = re.compile(r"(<!-- level: (\w+) -->\n```text\n)(.*?)(\n```)", re.S)
DOC = Path(__file__).with_name("architecture.md")


def printed_levels() -> dict[str, str]:
    import lamina
    from lamina.program_spec import program_spec

    spec = program_spec(None, None)
    compiled = lamina.compile(spec.function(), spec.example_inputs())
    return {level: compiled.ir(level).rstrip() for level in ("torch", "tensor", "loop", "tile", "kernel", "cuda")}


def documented_levels(text: str) -> dict[str, str]:
    return {m.group(2): m.group(3) for m in LEVEL_BLOCK.finditer(text)}


def render(text: str, levels: dict[str, str]) -> str:
    return LEVEL_BLOCK.sub(lambda m: m.group(1) + levels[m.group(2)] + m.group(4), text)


if __name__ == "__main__":
    DOC.write_text(render(DOC.read_text(), printed_levels()))
    sys.exit(0)

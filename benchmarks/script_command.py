"""The command line recorded in a results file by the scripts under benchmarks/."""

from __future__ import annotations

from pathlib import Path


def reproducing_command(script: str, argv: list[str], out: str) -> str:
    """``python benchmarks/SCRIPT`` with ``argv``, the results file named under benchmarks/results/ wherever
    this run wrote it (``--out PATH`` or ``--out=PATH``), so that the command reproduces the file it is in."""
    kept, skip = [], False
    for item in argv:
        if skip:
            skip = False
        elif item == "--out":
            skip = True
        elif not item.startswith("--out="):
            kept.append(item)
    return " ".join(["python", f"benchmarks/{script}", *kept, "--out", f"benchmarks/results/{Path(out).name}"])

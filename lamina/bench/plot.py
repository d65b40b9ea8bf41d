"""``lamina bench --plot``: lamina's speedup per case against each contender, as a PNG (kernels and models).

matplotlib is an optional extra (``pip install "lamina[plot]"``).
"""

from __future__ import annotations

from pathlib import Path

from lamina.bench.runner import CONTENDERS, CaseResult
from lamina.core.errors import LaminaError


def require_matplotlib() -> None:
    """Fails before a long run, rather than after it, when the plot cannot be drawn."""
    _pyplot()


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise LaminaError('--plot needs matplotlib: pip install "lamina[plot]" (or pip install matplotlib)') from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_speedups(results: list[CaseResult], path: Path) -> None:
    """lamina's speedup against each contender, one group of bars per timed case."""
    timed = [r for r in results if r.status == "ok"]
    if not timed:
        raise LaminaError(f"--plot {path}: no case was timed, so there is nothing to draw")
    plot_speedup_bars([r.case.name for r in timed],
                      {f"vs {contender}": [r.speedup(contender) for r in timed] for contender in CONTENDERS[1:]}, path)


def plot_speedup_bars(names: list[str], series: dict[str, list[float | None]], path: Path) -> None:
    """Horizontal bars from 1x (parity), a group per name and a bar per series, on a log axis: losses point left."""
    plt = _pyplot()
    from matplotlib.ticker import FuncFormatter
    height = 0.8 / len(series)
    figure, axes = plt.subplots(figsize=(9, 1.2 + 0.3 * len(names) * len(series)))
    for k, (label, speedups) in enumerate(series.items()):
        values = [v or float("nan") for v in speedups]
        positions = [row + k * height for row in range(len(names))]
        axes.barh(positions, [v - 1.0 for v in values], left=1.0, height=height, label=label)
    axes.set_yticks([row + height * (len(series) - 1) / 2 for row in range(len(names))])
    axes.set_yticklabels(names, fontsize=7)
    axes.invert_yaxis()
    axes.set_xscale("log")
    shown = [v for speedups in series.values() for v in speedups if v is not None] + [1.0]
    axes.set_xticks([2.0**k for k in range(-10, 11) if min(shown) / 2 <= 2.0**k <= max(shown) * 2])
    axes.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}x"))
    axes.xaxis.set_minor_formatter(FuncFormatter(lambda x, _: ""))
    axes.axvline(1.0, color="black", linewidth=0.8)
    axes.set_xlabel("lamina's speedup (contender time / lamina time; right of 1 is faster)")
    axes.legend(loc="lower right")
    figure.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)

"""What tuning found, as tables: the kernels whose tuned setting beat the cost model's choice, and
where the cost model ranked the candidates otherwise than the measurements did, by schedule and
knob, so that its constants can be corrected from data."""

from __future__ import annotations

import itertools
import statistics
from typing import Iterable, Sequence

from lamina.contrib.autotune.database import Entry, Measured


def wins(tuned: Sequence[tuple[str, Entry]]) -> list[str]:
    """A table of the kernels whose tuned setting beat the cost model's choice, the largest gain first."""
    rows = sorted(((name, e) for name, e in tuned if e.winner != 0),
                  key=lambda row: row[1].chosen.time_us / row[1].cost_models.time_us)
    if not rows:
        return [f"the cost model's choice was the fastest for all {len(tuned)} kernel(s) measured"]
    width = max(len(name) for name, _ in rows)
    lines = [f"{'kernel'.ljust(width)}  {'tuned':>9}  {'cost model':>10}  gain   setting"]
    for name, entry in rows:
        gain = entry.cost_models.time_us / entry.chosen.time_us
        lines.append(f"{name.ljust(width)}  {entry.chosen.time_us:6.1f} us  {entry.cost_models.time_us:7.1f} us  "
                     f"{gain:4.2f}x  {setting_text(entry.chosen)}")
    total_tuned = sum(e.chosen.time_us for _, e in tuned)
    total_cost_model = sum(e.cost_models.time_us for _, e in tuned)
    lines.append(f"{len(rows)} of {len(tuned)} kernel(s) faster tuned; all {len(tuned)} together: "
                 f"{total_tuned:.1f} us tuned, {total_cost_model:.1f} us as the cost model chose")
    return lines


def setting_text(measured: Measured) -> str:
    knobs = ", ".join(f"{k}={v}" for k, v in sorted(measured.knobs.items()))
    return f"{measured.schedule}: {knobs}" if knobs else measured.schedule


def disagreements(entries: Iterable[Entry]) -> list[str]:
    """By schedule and knob, of the pairs of one kernel's measured candidates that differ in that knob,
    how many the cost model ranked otherwise than the measurements; and by schedule, how far its
    estimates are from the measured times."""
    pairs: dict[tuple[str, str], list[bool]] = {}
    ratios: dict[str, list[float]] = {}
    for entry in entries:
        ran = [c for c in entry.candidates if c.time_us is not None]
        for c in ran:
            if c.estimate_us > 0 and c.estimate_us != float("inf"):
                ratios.setdefault(c.schedule, []).append(c.time_us / c.estimate_us)
        for a, b in itertools.combinations(ran, 2):
            if a.schedule != b.schedule or a.estimate_us == b.estimate_us or a.time_us == b.time_us:
                continue
            misranked = (a.estimate_us < b.estimate_us) != (a.time_us < b.time_us)
            for knob in sorted(set(a.knobs) | set(b.knobs)):
                if a.knobs.get(knob) != b.knobs.get(knob):
                    pairs.setdefault((a.schedule, knob), []).append(misranked)
    if not pairs and not ratios:
        return ["no measurements to compare with the cost model"]
    lines = ["where the cost model ranked two candidates of a kernel otherwise than their measured times, by the "
             "knobs in which they differ:", f"{'schedule':14s} {'knob':22s} {'pairs':>6}  ranked otherwise"]
    for (schedule, knob), outcomes in sorted(pairs.items(), key=lambda item: -sum(item[1]) / len(item[1])):
        wrong = sum(outcomes)
        lines.append(f"{schedule:14s} {knob:22s} {len(outcomes):6d}  {wrong:4d} ({100 * wrong / len(outcomes):3.0f} %)")
    lines.append("measured / estimated time, median per schedule: " + ", ".join(
        f"{schedule} {statistics.median(values):.2f} ({len(values)} candidates)"
        for schedule, values in sorted(ratios.items())))
    return lines

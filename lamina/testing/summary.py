"""What a conformance run found, per suite and per subject (op, schedule, rule, backend, plugin).

Outcomes: ``passed``, ``failed``, ``skipped`` (an undeclared capability, no GPU, no
samples), ``xfailed`` (a known failure that still fails) and ``xpassed`` (a known
failure that now passes: strict, so it also fails the run).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import attrs

OUTCOMES = ("passed", "failed", "skipped", "xfailed", "xpassed")
_LABELS = {"passed": "passed", "failed": "failed", "skipped": "skipped",
           "xfailed": "expected failures", "xpassed": "unexpected passes"}


@attrs.frozen
class Result:
    suite: str
    plugin: str
    kind: str
    subject: str
    id: str
    outcome: str
    reason: str = ""


@attrs.define
class Summary:
    results: dict[str, Result] = attrs.field(factory=dict)

    def record(self, nodeid: str, result: Result) -> None:
        self.results[nodeid] = result

    def by_suite(self) -> dict[str, list[Result]]:
        grouped: dict[str, list[Result]] = defaultdict(list)
        for result in self.results.values():
            grouped[result.suite].append(result)
        return dict(grouped)

    @staticmethod
    def counts(results: list[Result]) -> dict[str, dict[str, int]]:
        per_subject: dict[str, Counter] = defaultdict(Counter)
        for r in results:
            per_subject[r.subject][r.outcome] += 1
        return {subject: {o: c[o] for o in OUTCOMES} for subject, c in sorted(per_subject.items())}

    def lines(self, every_subject: bool = True) -> list[str]:
        """A line per suite, then one per subject; unless ``every_subject``, only the subjects where
        something failed, failed as expected, passed unexpectedly, or nothing passed."""
        lines = []
        for suite, results in self.by_suite().items():
            total = Counter(r.outcome for r in results)
            lines.append(f"{suite} ({results[0].kind} plugin {results[0].plugin}): {_describe(total)}")
            for subject, counts in self.counts(results).items():
                notable = counts["failed"] or counts["xfailed"] or counts["xpassed"] or not counts["passed"]
                if every_subject or notable:
                    lines.append(f"  {subject}: {_describe(counts)}")
        return lines

    def as_json(self) -> dict:
        suites = []
        for suite, results in self.by_suite().items():
            suites.append({
                "suite": suite,
                "plugin": results[0].plugin,
                "kind": results[0].kind,
                "subjects": self.counts(results),
                "tests": [{"id": r.id, "outcome": r.outcome, **({"reason": r.reason} if r.reason else {})}
                          for r in results],
            })
        return {"suites": suites}

    def write(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.as_json(), indent=2) + "\n")


def _describe(counts) -> str:
    parts = [f"{counts[o]} {_LABELS[o]}" for o in OUTCOMES if counts.get(o)]
    return ", ".join(parts) or "nothing ran"

"""What compute-sanitizer printed for one process, and which representatives the process ran.

compute-sanitizer prefixes each line of its own with ``=========`` and ends with a summary:
memcheck with ``ERROR SUMMARY: N errors``, racecheck with ``RACECHECK SUMMARY: N hazards
displayed (E errors, W warnings)``. A finding names the kernel at the faulting instruction
(``at softmax+0x1b0``). The process it runs (``sanitize_kernels.py --run``) prints a line
``lamina-sanitize: begin ID`` before each representative and ``lamina-sanitize: end ID
STATUS DETAIL`` after it, so the report says which representatives ran, which passed the
check against eager, and where a hang stopped the process. The process synchronises with the
GPU before each end line, so a finding printed between a representative's begin and end lines
is that representative's: one process tells each representative's findings apart.
"""

from __future__ import annotations

import re

import attrs

TOOL_PREFIX = "========="
MARKER = "lamina-sanitize:"
FIRST_LINES = 30
"""Lines of findings kept with a verdict."""

_ERROR_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+) errors?")
_RACECHECK_SUMMARY = re.compile(
    r"RACECHECK SUMMARY:\s*(\d+) hazards? displayed\s*\((\d+) errors?,\s*(\d+) warnings?\)")
_KERNEL_AT = re.compile(r"\bat (?:void )?([A-Za-z_]\w*)(?:<[^>]*>)?(?:\([^)]*\))?\+0x[0-9a-fA-F]+")
_KERNEL_IN = re.compile(r"\bin (?:file )?\S+:\d+:([A-Za-z_]\w*)\(")
_NOISE = ("COMPUTE-SANITIZER", "LEAK SUMMARY", "Target application returned an error")


@attrs.frozen
class ToolOutput:
    """One process's report: the tool's counts (None where it printed no summary), its findings'
    first lines, the kernels they name, and each representative's begin and end as the process
    printed them."""

    errors: int | None
    hazards: int | None
    warnings: int | None
    findings: tuple[str, ...]
    kernels: tuple[str, ...]
    begun: tuple[str, ...]
    ended: dict[str, tuple[str, str]]
    """Representative id -> (status, detail) from its end line."""
    spans: dict[str, tuple[str, ...]]
    """Representative id -> the finding lines the tool printed while it ran (its first lines; a
    line that goes on with the finding above it indented by two spaces)."""
    outside: tuple[str, ...]
    """Finding lines printed while no representative ran (starting or ending the process)."""

    @property
    def has_summary(self) -> bool:
        return self.errors is not None

    @property
    def clean(self) -> bool:
        """The tool ran to its summary and reported nothing."""
        return self.errors == 0 and not self.hazards and not self.warnings

    def unfinished(self) -> list[str]:
        """Representatives that began and never ended: the process hung or died in them."""
        return [r for r in self.begun if r not in self.ended]

    def findings_of(self, representative: str) -> tuple[str, ...]:
        return self.spans.get(representative, ())


def parse(text: str) -> ToolOutput:
    errors = hazards = warnings = None
    findings: list[str] = []
    begun: list[str] = []
    ended: dict[str, tuple[str, str]] = {}
    spans: dict[str, list[str]] = {}
    outside: list[str] = []
    running = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(MARKER):
            words = stripped[len(MARKER):].split(maxsplit=3)
            if len(words) >= 2 and words[0] == "begin":
                begun.append(words[1])
                running = words[1]
            elif len(words) >= 3 and words[0] == "end":
                ended[words[1]] = (words[2], words[3] if len(words) > 3 else "")
                running = None
            continue
        if not stripped.startswith(TOOL_PREFIX):
            continue
        body = stripped[len(TOOL_PREFIX):].strip()
        race = _RACECHECK_SUMMARY.search(body)
        error = _ERROR_SUMMARY.search(body)
        if race:
            hazards, race_errors, warnings = (int(g) for g in race.groups())
            errors = race_errors if errors is None else max(errors, race_errors)
        elif error:
            errors = int(error.group(1)) if errors is None else max(errors, int(error.group(1)))
        elif body and not any(body.startswith(n) for n in _NOISE):
            if len(findings) < FIRST_LINES:
                findings.append(body)
            where = spans.setdefault(running, []) if running is not None else outside
            if len(where) < FIRST_LINES:  # a line that goes on with the finding above it is indented
                continued = stripped[len(TOOL_PREFIX):].startswith("  ")
                where.append("  " + body if continued else body)
    return ToolOutput(errors, hazards, warnings, tuple(findings), kernels_named(findings), tuple(begun), ended,
                      {r: tuple(lines) for r, lines in spans.items()}, tuple(outside))


def kernels_named(lines) -> tuple[str, ...]:
    """The kernels that finding lines name, in order of first mention."""
    kernels: dict[str, None] = {}
    for line in lines:
        for pattern in (_KERNEL_AT, _KERNEL_IN):
            for name in pattern.findall(line):
                kernels.setdefault(name, None)
    return tuple(kernels)


def finding_starts(lines) -> list[str]:
    """The lines that begin a finding (the others, indented, go on with the one above)."""
    return [line for line in lines if not line.startswith(" ")]


def verdict(output: ToolOutput, returncode: int | None, representative: str) -> str:
    """One word for one representative, from what the tool printed while it ran:
    ``clean``, ``errors`` (the tool's), ``hazards`` (racecheck's warnings only), ``mismatch``
    (wrong numbers, the tool silent), ``setting-changed`` (the kernel compiled on the GPU is not
    the setting it represents), ``failed`` (the run raised, or the process died in it),
    ``timeout``, or ``no-summary`` (the tool never printed its summary: it crashed)."""
    if representative not in output.ended:
        return "timeout" if returncode is None else "failed"
    own = finding_starts(output.findings_of(representative))
    if own:
        return "hazards" if all(line.startswith("Warning") for line in own) else "errors"
    status = output.ended[representative][0]
    if status in ("mismatch", "setting-changed"):
        return status
    if status != "ok":
        return "failed"
    if not output.has_summary and returncode is not None:
        return "no-summary"
    return "clean"


"""What ``lamina bench`` shows and writes: a progress line, the table, the geomeans and the JSON record."""

from __future__ import annotations

import datetime
import os
import re
import shlex
import sys
from pathlib import Path
from typing import IO, Any

import torch

from lamina.bench.runner import CALLS_PER_SHORT_GRAPH, CONTENDERS, SHORT_CALL_US, CaseResult, geomean_speedups
from lamina.bench.suite import SHORT, copy_bytes_per_second, measured_target, peak_flops_per_second
from lamina.core.version import __version__

SCHEMA = "lamina-bench/1"
COLUMNS = (("case", "<"), ("error", ">"), ("lamina us", ">"), ("eager us", ">"), ("t.compile us", ">"),
           ("vs eager", ">"), ("vs t.compile", ">"), ("GB/s", ">"), ("%copy", ">"), ("TFLOP/s", ">"),
           ("%peak", ">"), ("cold us", ">"), ("cold %copy", ">"), ("same-size copy %copy", ">"),
           ("cold vs t.compile", ">"),
           ("lamina build s", ">"), ("t.compile build s", ">"))
LEGEND = ("t.compile: torch.compile(dynamic=False). vs X: X's time / lamina's (above 1x, lamina is faster). "
          "GB/s, TFLOP/s: lamina's, against the H200's copy ceiling and fp32/bf16/fp16 peak. "
          "cold: rotating among input sets that overflow L2, each call writing its own output (memory-bound cases). "
          "same-size copy: a copy_ of as many bytes, timed cold the same way (what a kernel of that size can reach). "
          f"Cases whose fastest contender takes under {SHORT_CALL_US:g} us are timed {CALLS_PER_SHORT_GRAPH} "
          "calls to a graph, per call.")


class ProgressLine:
    """One line rewritten in place on a terminal; one line per case elsewhere (logs)."""

    def __init__(self, stream: IO[str] = sys.stderr):
        self.stream = stream
        self.live = stream.isatty()
        self.current = ""

    def __call__(self, index: int, total: int, name: str) -> None:
        self.current = f"[{index}/{total}] {name}" if name else ""
        if self.live:
            self.stream.write(f"\r\033[K{self.current}")
        elif name:
            self.stream.write(f"[{index + 1}/{total}] {name}\n")
        self.stream.flush()

    def step(self, text: str) -> None:
        """What is done so far within the current case: after its name on a terminal, an indented line elsewhere."""
        if self.live:
            self.stream.write(f"\r\033[K{self.current}: {text}")
        else:
            self.stream.write(f"    {text}\n")
        self.stream.flush()


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def bandwidth(result: CaseResult, us: float | None) -> float | None:
    """Bytes per second when the case takes ``us`` microseconds."""
    return None if us is None else result.case.bytes_moved / (us * 1e-6)


def throughput(result: CaseResult, us: float | None) -> float | None:
    return None if us is None else result.case.flops / (us * 1e-6)


def _row(result: CaseResult) -> tuple[str, ...]:
    case, times, cold = result.case, result.times, result.cold_times
    if result.status != "ok":
        return (case.name, _error(result), result.status.upper() + ": " + result.message)
    lamina_us, cold_us = times.get("lamina"), cold.get("lamina")
    rate, flops, cold_rate = bandwidth(result, lamina_us), throughput(result, lamina_us), bandwidth(result, cold_us)
    peak, copy = peak_flops_per_second(case.dtype), copy_bytes_per_second()
    return (case.name, _error(result), _us(lamina_us), _us(times.get("eager")), _us(times.get("torch.compile")),
            _ratio(result.speedup("eager")), _ratio(result.speedup("torch.compile")),
            f"{rate / 1e9:.0f}", _percent(rate / copy),
            f"{flops / 1e12:.2f}", _percent(flops / peak),
            _us(cold_us), _percent(None if cold_rate is None else cold_rate / copy),
            _percent(None if result.copy_cold_us is None else bandwidth(result, result.copy_cold_us)
                     / copy),
            _ratio(result.speedup("torch.compile", "cold")),
            f"{result.compile_seconds['lamina']:.2f}", f"{result.compile_seconds['torch.compile']:.2f}")


def _error(result: CaseResult) -> str:
    return "-" if result.error is None else f"{result.error:.1e}"


def format_table(results: list[CaseResult]) -> str:
    """The table, then a geomean line per figure. Speedups are lamina's (above 1x: lamina is faster)."""
    header = tuple(name for name, _ in COLUMNS)
    rows = [_row(r) for r in results]
    full = [row for row in rows if len(row) == len(header)]
    widths = [max(len(row[k]) for row in [header] + full) for k in range(len(header))]
    widths[0] = max(len(row[0]) for row in [header] + rows)

    def line(row: tuple[str, ...]) -> str:
        if len(row) < len(header):
            return "  ".join([row[0].ljust(widths[0]), row[1].rjust(widths[1])] + list(row[2:])).rstrip()
        return "  ".join(cell.ljust(w) if align == "<" else cell.rjust(w)
                         for cell, w, (_, align) in zip(row, widths, COLUMNS)).rstrip()

    lines = [LEGEND, "", line(header), "  ".join("-" * w for w in widths)] + [line(row) for row in rows]
    lines.append("")
    lines += geomean_lines(results)
    return "\n".join(lines)


def geomean_lines(results: list[CaseResult]) -> list[str]:
    timed = sum(1 for r in results if r.status == "ok")
    lines = []
    for figure, label in (("hot", "warm L2"), ("cold", "cold L2, memory-bound cases")):
        means = geomean_speedups(results, figure)
        if means:
            parts = ", ".join(f"{_ratio(value)} vs {name}" for name, value in means.items())
            lines.append(f"geomean speedup of lamina ({label}): {parts}")
    lines.append(f"{timed} of {len(results)} case(s) timed; "
                 f"{sum(1 for r in results if r.status == 'mismatch')} mismatch(es), "
                 f"{sum(1 for r in results if r.status == 'failed')} failure(s)")
    return lines


def gpu_slug(name: str) -> str:
    """A short file-name tag for a GPU: "NVIDIA H200" -> "h200"."""
    plain = name.lower().removeprefix("nvidia ")
    known = re.search(r"\b([a-z]{1,2}\d{2,4}[a-z]?)\b", plain)
    return known.group(1) if known else re.sub(r"[^a-z0-9]+", "-", plain).strip("-") or "gpu"


def default_output(gpu_name: str, today: datetime.date | None = None, suite: str = "bench") -> Path:
    today = today or datetime.date.today()
    return Path("benchmarks") / "results" / f"{today.isoformat()}_{gpu_slug(gpu_name)}_{suite}.json"


def reproducing_command(argv: list[str]) -> str:
    """The command line that reproduces a run, with every absolute path made relative to the working directory."""
    return shlex.join(["lamina", "bench", *(_relative(word) for word in argv)])


def _relative(word: str) -> str:
    option, equals, value = word.partition("=") if word.startswith("--") else ("", "", word)
    if os.path.isabs(value):
        value = os.path.relpath(value)
    return option + equals + value


def _case_record(result: CaseResult) -> dict[str, Any]:
    case = result.case
    record: dict[str, Any] = {
        "name": case.name, "expression": case.expression,
        "inputs": [{"name": i.name, "shape": list(i.shape), "dtype": str(i.dtype).removeprefix("torch.")}
                   for i in case.inputs],
        "dtype": SHORT.get(case.dtype, str(case.dtype)), "bytes": case.bytes_moved, "flops": case.flops,
        "memory_bound": case.memory_bound, "status": result.status, "message": result.message,
        "relative_error": result.error, "tolerance": result.tolerance,
        "us": dict(result.times), "calls_per_graph": result.hot_calls,
        "cold_us": dict(result.cold_times), "cold_input_sets": result.cold_sets,
        "same_size_copy_cold_us": result.copy_cold_us,
        "compile_seconds": dict(result.compile_seconds),
        "speedup": {c: result.speedup(c) for c in CONTENDERS[1:] if result.speedup(c) is not None},
        "cold_speedup": {c: result.speedup(c, "cold") for c in CONTENDERS[1:] if result.speedup(c, "cold") is not None},
    }
    lamina_us = result.times.get("lamina")
    if lamina_us is not None:
        record["lamina_gb_per_s"] = bandwidth(result, lamina_us) / 1e9
        record["lamina_tflop_per_s"] = throughput(result, lamina_us) / 1e12
    if "lamina" in result.cold_times:
        record["lamina_cold_gb_per_s"] = bandwidth(result, result.cold_times["lamina"]) / 1e9
    return record


def json_document(results: list[CaseResult], *, command: str, device: str, replays: int,
                  date: str | None = None) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "date": date or datetime.date.today().isoformat(),
        "command": command,
        "device": device,
        "lamina": __version__,
        "torch": torch.__version__,
        "method": {"timing": "CUDA-graph replay, median", "replays": replays, "warmup": 10,
                   "short_calls": f"a case whose fastest contender takes under {SHORT_CALL_US:g} us per call is timed "
                                  f"with {CALLS_PER_SHORT_GRAPH} back-to-back calls per graph, per call",
                   "cold": "graph cycling through enough input sets to touch twice the L2, each call writing its own output",
                   "l2_bytes": measured_target().l2_bytes, "speedup": "contender time / lamina time"},
        "ceilings": {"copy_bytes_per_s": copy_bytes_per_second(),
                     "flop_per_s": {short: peak_flops_per_second(dtype) for dtype, short in SHORT.items()}},
        "geomean_speedup": geomean_speedups(results),
        "geomean_cold_speedup": geomean_speedups(results, "cold"),
        "cases": [_case_record(r) for r in results],
    }

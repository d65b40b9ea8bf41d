"""What ``lamina bench --models`` shows and writes: the case listing, the table with its geomeans,
the JSON record and the plot."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import tempfile
from pathlib import Path
from typing import Any

import torch

from lamina.bench.model_runner import (BF16_ERROR_RATIO, FIGURES, FP32_TOLERANCE, LONG_CALL_BUDGET_S, MEASUREMENTS,
                                       PLAIN_CALLS, SEED, ModelResult, geomean_speedups, judged_by)
from lamina.bench.model_suite import ModelCase
from lamina.bench.runner import CONTENDERS
from lamina.bench.suite import SHORT
from lamina.core.errors import LaminaError
from lamina.core.version import __version__

SCHEMA = "lamina-bench-models/1"
SHORT_NAME = {"lamina": "lamina", "eager": "eager", "torch.compile": "t.c"}
LEGEND = ("Prefill, model(**inputs). t.c: torch.compile(model, dynamic=False); lamina: torch.compile(model, "
          "backend=\"lamina\", dynamic=False). graph: CUDA-graph replay; calls: plain calls, host overhead included. "
          "vs X: X's time / lamina's (above 1x, lamina is faster). error: lamina's, against eager float64 (fp32) "
          "or float32 (bf16); x eager: lamina's error over eager's. l/e/t: lamina/eager/torch.compile.")
MESSAGE_WIDTH = 100


def _cell(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _ms(us: float | None) -> str:
    return _cell(None if us is None else us / 1000, ".3f")


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _triple(result: ModelResult, measurement: str, spec: str, scale: float = 1.0) -> str:
    """One measurement of the three contenders in one cell: lamina/eager/torch.compile."""
    values = result.values.get(measurement, {})
    return "/".join(_cell(None if c not in values else values[c] / scale, spec) for c in CONTENDERS)


def _columns() -> list[tuple[str, str]]:
    columns = [("case", "<"), ("layers", ">"), ("error", ">"), ("x eager", ">")]
    for figure in ("graph", "calls"):
        columns += [(f"{figure} {SHORT_NAME[c]} ms", ">") for c in CONTENDERS]
        columns += [(f"{figure} vs {SHORT_NAME[c]}", ">") for c in CONTENDERS[1:]]
    return columns + [("kernels l/e/t", ">"), ("per layer l/e/t", ">"), ("peak MiB l/e/t", ">"),
                      ("compile s cold/warm/t", ">")]


def _row(result: ModelResult) -> tuple[str, ...]:
    head = (result.case.name, result.case.depth, _cell(result.errors.get("lamina"), ".1e"), _ratio(result.error_ratio))
    if result.status != "ok":
        return head + (f"{result.status.upper()}: {result.message}"[:MESSAGE_WIDTH],)
    cells = []
    for figure in FIGURES:
        cells += [_ms(result.values[figure].get(c)) for c in CONTENDERS]
        cells += [_ratio(result.speedup(c, figure)) for c in CONTENDERS[1:]]
    compile_seconds = "/".join(_cell(result.compile_seconds.get(k), ".1f")
                               for k in ("lamina_cold", "lamina_warm", "torch.compile"))
    return head + tuple(cells) + (_triple(result, "kernels", ".0f"), _triple(result, "kernels_per_layer", "g"),
                                  _triple(result, "peak_bytes", ".0f", 2**20), compile_seconds)


def _layout(columns: list[tuple[str, str]], rows: list[tuple[str, ...]]) -> list[str]:
    """Aligned lines; a short row (a case that was not measured) fills its first cells, then its message runs on."""
    header = tuple(name for name, _ in columns)

    def aligned(row: tuple[str, ...]) -> tuple[str, ...]:
        return row if len(row) == len(header) else row[:-1]

    widths = [max(len(cells[k]) for cells in map(aligned, [header] + rows) if k < len(cells))
              for k in range(len(header))]

    def line(row: tuple[str, ...]) -> str:
        cells = [cell.ljust(w) if align == "<" else cell.rjust(w)
                 for cell, w, (_, align) in zip(aligned(row), widths, columns)]
        return "  ".join(cells + list(row[len(cells):])).rstrip()

    return [line(header), "  ".join("-" * w for w in widths)] + [line(row) for row in rows]


def format_model_table(results: list[ModelResult]) -> str:
    """Every case, losses and failures included, then what could not be measured, then the geomeans."""
    lines = [LEGEND, ""] + _layout(_columns(), [_row(r) for r in results])
    unmeasured = [f"  {r.case.name}, {measurement} of {contender}: {why}"[:MESSAGE_WIDTH + 40]
                  for r in results for measurement, whys in r.unmeasured.items() for contender, why in whys.items()]
    if unmeasured:
        lines += ["", "not measured:"] + unmeasured
    return "\n".join(lines + [""] + geomean_lines(results))


def geomean_lines(results: list[ModelResult]) -> list[str]:
    lines = []
    for figure, means in geomean_speedups(results).items():
        parts = ", ".join(f"{_ratio(mean)} vs {contender} ({cases} case(s))"
                          for contender, (mean, cases) in means.items())
        lines.append(f"geomean speedup of lamina, {FIGURES[figure]}: {parts}")
    counts = {status: sum(1 for r in results if r.status == status) for status in ("ok", "mismatch", "failed")}
    lines.append(f"{counts['ok']} of {len(results)} case(s) measured; {counts['mismatch']} mismatch(es), "
                 f"{counts['failed']} failure(s)")
    return lines


def format_model_listing(cases: list[ModelCase]) -> str:
    width = max(len(c.name) for c in cases)
    depth = max(len(c.depth) for c in cases)
    lines = [f"{'case'.ljust(width)}  {'layers'.rjust(depth)}  builds"]
    lines += [f"{c.name.ljust(width)}  {c.depth.rjust(depth)}  {c.describe()}" for c in cases]
    lines.append(f"{len(cases)} case(s)")
    return "\n".join(lines)


def _transformers_version() -> str | None:
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return None


def method(replays: int, per_layer: bool, torch_compile: bool, shared: bool = False) -> dict[str, Any]:
    """How every number of the record was measured, in words; ``shared``: under ``--measure-lock``."""
    found = {
        "prefill": f"one forward pass over the whole input, model(**inputs) as users call it (KV cache on where the "
                   f"model has one), random weights and inputs (seed {SEED})",
        "contenders": "lamina: torch.compile(model, backend='lamina', dynamic=False); eager: the model itself; "
                      "torch.compile: torch.compile(model, dynamic=False), Inductor's default mode; all in one "
                      "process on the same inputs" + ("" if torch_compile else " (torch.compile left out)"),
        "graph_us": f"microseconds per call from CUDA-graph replays of one call, CUDA events, median of {replays} "
                    f"replays after warm-up, or of as many as fit in {LONG_CALL_BUDGET_S:g} s of replays (at least 5) "
                    "where a call is longer; a contender a graph cannot capture is listed under unmeasured",
        "calls_us": f"microseconds per call, median wall time of {PLAIN_CALLS} plain calls after 3 warm-up calls, "
                    f"or of as many as fit in {LONG_CALL_BUDGET_S:g} s (at least 3) where a call is longer, each "
                    "synchronized (host overhead included)",
        "relative_error": "||out - ref|| / ||ref|| of the main output (logits, or the last hidden state), ref: eager "
                          "PyTorch on the same weights and inputs cast to float64 (float32 models; float32 where a "
                          "float64 copy does not fit on the GPU) or to float32 (bfloat16 models)",
        "judged": f"float32: lamina's error under {FP32_TOLERANCE:g}; bfloat16: lamina's error at most "
                  f"{BF16_ERROR_RATIO:g}x eager bfloat16's own (error_ratio); a mismatch is not measured further",
        "kernels": "CUDA kernels per call by the PyTorch profiler (memcpy and memset left out)",
        "kernels_per_layer": ("(kernels with N layers - kernels with 1 layer) / (N - 1), the 1-layer model built "
                              "with the same seed and compiled once more by each contender; none for a model built "
                              "with 1 layer") if per_layer
                             else "not measured (--no-per-layer)",
        "peak_bytes": "torch.cuda.max_memory_allocated during one plain call, above what was allocated before it",
        "compile_seconds": "lamina_cold: seconds from torch.compile to the end of the first call with an empty "
                           "LAMINA_CACHE_DIR; lamina_warm: the same after torch._dynamo.reset(), the kernel cache "
                           "warm; torch.compile: its first call, with Inductor's caches as found",
        "speedup": "contender time / lamina time (above 1, lamina is faster); geomeans over the cases where both "
                   "were measured",
        "replays": replays, "plain_calls": PLAIN_CALLS, "seed": SEED,
    }
    if shared:
        found["measure_lock"] = ("other bench processes shared the GPU and the host: each measurement, and every "
                                 "other run on the GPU (the eager reference, each compiled graph's calls), held the "
                                 "lock, so no CUDA-graph time, kernel count or memory peak saw their work, but "
                                 "plain-call and compile times may include their competing for the host's cores")
    return found


def _case_record(result: ModelResult) -> dict[str, Any]:
    case = result.case
    record: dict[str, Any] = {
        "name": case.name, "architecture": case.arch.name, "checkpoint": case.arch.checkpoint,
        "model_class": case.arch.model_class, "size": case.size, "batch": case.batch, "length": case.length,
        "dtype": SHORT[case.dtype], "layers": case.layers, "layers_in_checkpoint": case.arch.layers(case.size),
        "builds": case.describe(), "status": result.status, "message": result.message,
        "reference": result.reference, "relative_error": dict(result.errors), "error_ratio": result.error_ratio,
        "judged_by": judged_by(case.dtype),
    }
    record.update({measurement: dict(result.values.get(measurement, {})) for measurement in MEASUREMENTS})
    record["compile_seconds"] = dict(result.compile_seconds)
    record["speedup"] = {figure: {c: s for c in CONTENDERS[1:] if (s := result.speedup(c, figure)) is not None}
                         for figure in FIGURES}
    record["unmeasured"] = {m: dict(whys) for m, whys in result.unmeasured.items()}
    if result.traceback:
        record["traceback"] = result.traceback
    return record


def json_document(results: list[ModelResult], *, command: str, device: str, replays: int, per_layer: bool = True,
                  torch_compile: bool = True, shared: bool = False, date: str | None = None) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "suite": "models",
        "date": date or datetime.date.today().isoformat(),
        "command": command,
        "device": device,
        "lamina": __version__,
        "torch": torch.__version__,
        "transformers": _transformers_version(),
        "python": platform.python_version(),
        "method": method(replays, per_layer, torch_compile, shared),
        "geomean_speedup": {figure: {c: {"speedup": mean, "cases": cases} for c, (mean, cases) in means.items()}
                            for figure, means in geomean_speedups(results).items()},
        "cases": [_case_record(r) for r in results],
    }


def write_document(path: Path, document: dict[str, Any]) -> None:
    """Replace ``path`` only once the new record is whole, so that a run killed mid-write keeps the last one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(descriptor, "w") as f:
        f.write(json.dumps(document, indent=2) + "\n")
    os.replace(temporary, path)


def plot_model_speedups(results: list[ModelResult], path: Path) -> None:
    """lamina's speedup per measured case, a bar per contender and figure."""
    from lamina.bench.plot import plot_speedup_bars

    timed = [r for r in results if any(r.speedup(c, f) is not None for c in CONTENDERS[1:] for f in FIGURES)]
    if not timed:
        raise LaminaError(f"--plot {path}: no case was timed, so there is nothing to draw")
    series = {f"vs {c}, {name}": [r.speedup(c, figure) for r in timed]
              for figure, name in FIGURES.items() for c in CONTENDERS[1:]}
    plot_speedup_bars([r.case.name for r in timed],
                      {label: values for label, values in series.items() if any(v is not None for v in values)}, path)

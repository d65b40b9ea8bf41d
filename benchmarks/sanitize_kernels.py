"""compute-sanitizer's memcheck and racecheck over one kernel of every schedule setting the suites use.

    python benchmarks/sanitize_kernels.py --list [--save reps.json]   # the settings and their kernels (CPU)
    python benchmarks/sanitize_kernels.py --sanitize memcheck,racecheck [--representatives reps.json] \\
        --out benchmarks/results/DATE_h200_sanitize.json    # on the GPU: a verdict per setting and tool
    compute-sanitizer --tool racecheck python benchmarks/sanitize_kernels.py --run --representatives reps.json
    python benchmarks/sanitize_kernels.py --run --device cpu --representatives reps.json   # the checks, simulated

The settings are those of every kernel of the kernel suite (``lamina bench``, float32 and
bfloat16) and of the scaled-down model matrix (``tests/models/test_model_matrix.py``,
``--no-models`` leaves it out), compiled for sm_90 on the CPU; ``kernel_settings.py`` says what a
setting is and how its representative is chosen and shrunk. ``--run`` runs each representative's
program once on the GPU with random inputs and checks every output against eager PyTorch at a
wider dtype, so a kernel that reads out of bounds and happens to give the right numbers is
caught by memcheck, and a wrong one by the check, even where the tool sees nothing.

``--sanitize`` runs the representatives in one compute-sanitizer process per tool, the tools at
once (starting torch under a tool takes tens of seconds). A finding belongs to the
representative whose begin and end lines it is printed between; one that failed after another's
finding in the same process (a faulting kernel leaves the CUDA context unusable) runs again in a
new process, and a representative that stops making progress for ``--timeout`` seconds is
stopped and marked ``timeout``, and the others run on. Every process's output is kept beside
``--out`` (``.log``). The caching allocator is off in the runs
(``PYTORCH_NO_CUDA_MEMORY_CACHING=1``, which ``--run`` sets itself), so that memcheck sees each
tensor as its own allocation and an access past its end as out of bounds. Finding the
representatives compiles about 150 programs (``--jobs`` at once); ``--save`` on the CPU and
``--representatives`` on the GPU skip that there.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import fnmatch
import json
import math
import os
import queue
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import kernel_settings as ks
import sanitizer_output
from script_command import reproducing_command

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
ERROR_EXIT_CODE = 86
"""compute-sanitizer's exit status where it found errors (``--error-exitcode``), apart from the program's own."""
NO_CACHING = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
SCRIPT = Path(__file__).resolve()
API_ERRORS = ("--report-api-errors", "no")
"""The tools' reports of failing driver calls are off: lamina's driver wrapper raises on every call
of its own that fails, so the program's check sees those, and what remains are cuda-python's probes
for entry points the driver lacks (34 ``cuGetProcAddress`` calls per process on the H200), which
say nothing about a kernel."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--list", action="store_true", help="print each setting and its representative (CPU)")
    mode.add_argument("--run", action="store_true", help="run the representatives on the GPU and check them")
    parser.add_argument("--device", default="cuda", help="with --run: where the programs run (cpu: on the simulator)")
    mode.add_argument("--sanitize", metavar="TOOLS", help="comma-separated tools, e.g. memcheck,racecheck")
    parser.add_argument("--out", help="with --sanitize: the JSON record to write")
    parser.add_argument("--save", metavar="FILE", help="also write the representatives as JSON")
    parser.add_argument("--representatives", metavar="FILE", help="read the representatives from FILE (--save's)")
    parser.add_argument("--only", help="comma-separated representative ids (what --sanitize hands --run)")
    parser.add_argument("--filter", action="append", default=[], metavar="PATTERN",
                        help="keep representatives whose id, setting or case matches this shell pattern (repeatable)")
    parser.add_argument("--limit", type=int, help="keep at most this many representatives")
    parser.add_argument("--no-models", action="store_true", help="leave the scaled-down model matrix out")
    parser.add_argument("--dtypes", default="float32,bfloat16", help="the kernel suite's dtypes (default both)")
    parser.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1),
                        help="processes that compile the programs at once (default %(default)s)")
    parser.add_argument("--timeout", type=float, default=150.0,
                        help="seconds a tool's process may go without finishing a representative (default %(default)s)")
    parser.add_argument("--budget", type=float, default=420.0,
                        help="seconds for the tools' processes (the tools run at once, each in its own "
                             "processes): a process still running when they are spent is stopped, and what "
                             "it had not finished, and what is left, is 'not-run' (default %(default)s)")
    parser.add_argument("--compute-sanitizer", metavar="PATH", help="the tool (default: on PATH, else CUDA's bin)")
    parser.add_argument("--racecheck-report", choices=("analysis", "hazard", "all"), default="analysis",
                        help="racecheck's report (default %(default)s: one line per race between two accesses)")
    args = parser.parse_args(argv)
    if args.sanitize is not None:
        tools = [t.strip() for t in args.sanitize.split(",") if t.strip()]
        unknown = [t for t in tools if t not in TOOLS]
        if not tools or unknown:
            parser.error(f"--sanitize {args.sanitize}: the tools are {', '.join(TOOLS)}")
        args.tools = tools
        if not args.out:
            parser.error("--sanitize needs --out FILE.json")
    return args


# --- choosing the representatives ----------------------------------------------------------------

def find_representatives(args: argparse.Namespace) -> tuple[list[ks.Representative], dict[str, Any]]:
    """The representatives (enumerated, or read from ``--representatives``), filtered, and how they were found."""
    if args.representatives:
        document = json.loads(Path(args.representatives).read_text())
        found = [ks.representative_from_json(r) for r in document["representatives"]]
        about = document.get("enumeration", {})
    else:
        started = time.perf_counter()
        programs = ks.suite_programs(args.dtypes.split(",")) + ([] if args.no_models else ks.model_programs())
        compiled, failed = ks.compile_all(programs, args.jobs)
        found = ks.representatives(compiled, jobs=args.jobs)
        about = {"programs": len(programs), "compile_failures": failed, "kernels": sum(len(c.kernels) for c in compiled),
                 "seconds": round(time.perf_counter() - started, 1), "models": not args.no_models,
                 "dtypes": args.dtypes.split(",")}
    if args.only:
        wanted = args.only.split(",")
        found = [r for r in found if r.id in wanted]
    if args.filter:
        found = [r for r in found if any(fnmatch.fnmatch(text, p) for p in args.filter
                                         for text in (r.id, ks.describe(r.setting), r.program.name))]
    if args.limit is not None:
        found = found[:args.limit]
    if args.save:
        Path(args.save).write_text(json.dumps({"enumeration": about, "representatives": [r.to_json() for r in found]},
                                              indent=2) + "\n")
    return found, about


def runs(found: list[ks.Representative]) -> list[tuple[str, list[ks.Representative]]]:
    """The representatives grouped by program, each program run once: (first id, its representatives)."""
    groups: dict[str, list[ks.Representative]] = {}
    for r in found:
        groups.setdefault(json.dumps(r.program.to_json(), sort_keys=True), []).append(r)
    return [(group[0].id, group) for group in groups.values()]


def print_list(found: list[ks.Representative], about: dict[str, Any]) -> None:
    for r in found:
        print(f"{r.id:24s} {ks.describe(r.setting)}")
        where = f"    {r.program.name}, kernel {r.kernel}: {r.program.shapes()}"
        if r.shrunk_from:
            pinned = "knobs pinned" if getattr(r.program, "knobs", ()) else "unpinned"
            where += f" (shrunk from {r.shrunk_from}, {pinned})"
        print(where + f"; {r.work} iterations; {r.uses} kernel{'s' if r.uses > 1 else ''} with this setting")
    programs = len(runs(found))
    print(f"{len(found)} settings, {programs} programs to run"
          + (f"; from {about['kernels']} kernels of {about['programs']} programs" if "kernels" in about else ""))
    for failure in about.get("compile_failures", []):
        print(f"not compiled: {failure}")


# --- running them (inside the tool) --------------------------------------------------------------

def _marker(*words: Any) -> None:
    print(sanitizer_output.MARKER, *words, flush=True)


def run_program(group: list[ks.Representative], device: str = "cuda") -> tuple[str, str]:
    """Run the representatives' program once on ``device`` (the CPU: on the simulator); (status,
    detail): ``ok``, ``mismatch``, or ``setting-changed`` (no kernel compiled there has a representative's setting)."""
    import torch
    import torch.utils._pytree as pytree

    import lamina
    from lamina.bench.measure import relative_error
    from lamina.bench.runner import REFERENCE_DTYPE, TOLERANCE

    program = group[0].program
    if isinstance(program, ks.SuiteProgram):
        spec = program.spec()
        fn, inputs = spec.function(), spec.example_inputs(seed=0)
        wider = REFERENCE_DTYPE.get(inputs[0].dtype, torch.float64)
        with torch.no_grad():
            expected = [fn(*(t.to(wider) if t.is_floating_point() else t for t in inputs))]
        on_device = tuple(t.to(device) for t in inputs)
        compiled = lamina.compile(fn, on_device, **({"knobs": program.pinned()} if program.knobs else {}))
        with torch.no_grad():
            outputs = [compiled(*on_device)]
        tolerance = TOLERANCE.get(inputs[0].dtype, 1e-4)
    else:
        from lamina.models.measure import eager_at
        model, inputs = program.build()
        eager = eager_at(model, inputs, torch.float64)
        model = model.to(device)
        on_device = {k: v.to(device) for k, v in inputs.items()}
        compiled = lamina.compile(model, example_kwargs=on_device)
        with torch.no_grad():
            outputs = pytree.tree_leaves(compiled(**on_device))
        # flattened after compiling, which registers the model's cache class with pytree: eager's
        # cache then flattens into its tensors as the compiled program's does
        expected = pytree.tree_leaves(eager)
        tolerance = 1e-4
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    settings = {t.kernel.name: ks.setting_of(t) for t in compiled.compilation.tiles}
    moved = []
    for r in group:
        if settings.get(r.kernel) == r.setting:
            continue
        # the program captured on the device may name its kernels otherwise (CUDA's attention ops
        # decompose differently): the setting is still exercised where another kernel has it
        other = next((name for name, setting in settings.items() if setting == r.setting), None)
        if other is None:
            found = ks.describe(settings[r.kernel]) if r.kernel in settings else "no such kernel"
            return "setting-changed", f"{r.id}: kernel {r.kernel} compiled for {device}: {found}"
        moved.append(f"{r.id} in kernel {other}")
    if len(outputs) != len(expected) or not all(isinstance(e, torch.Tensor) for e in expected):
        kinds = ", ".join(sorted({type(e).__name__ for e in expected}))
        return "mismatch", f"{len(outputs)} outputs where eager has {len(expected)} ({kinds})"
    worst = max(relative_error(o, e) for o, e in zip(outputs, expected))
    detail = f"error={worst:.2e} tolerance={tolerance:.0e}" + "".join(f", {m}" for m in moved)
    return ("ok" if worst <= tolerance else "mismatch"), detail


def run_all(found: list[ks.Representative], device: str = "cuda") -> int:
    """Every program once, between begin and end lines; 1 where any is not ok."""
    os.environ.update(NO_CACHING)
    failures = 0
    for first, group in runs(found):
        _marker("begin", first)
        started = time.perf_counter()
        try:
            status, detail = run_program(group, device)
        except Exception as e:  # a failing program must not hide the others
            status, detail = "failed", f"{type(e).__name__}: {e}".splitlines()[0]
        failures += status != "ok"
        _marker("end", first, status, f"seconds={time.perf_counter() - started:.2f} {detail}")
    return 1 if failures else 0


# --- the tool's processes ------------------------------------------------------------------------

def find_tool(path: str | None) -> str:
    for candidate in (path, shutil.which("compute-sanitizer"), "/usr/local/cuda/bin/compute-sanitizer"):
        if candidate and Path(candidate).exists():
            return candidate
    raise SystemExit("compute-sanitizer is neither on PATH nor in /usr/local/cuda/bin: pass --compute-sanitizer PATH")


def tool_command(tool_path: str, tool: str, racecheck_report: str, representatives: str, ids: list[str]) -> list[str]:
    options = ["--tool", tool, "--error-exitcode", str(ERROR_EXIT_CODE), *API_ERRORS]
    if tool == "racecheck":
        options += ["--racecheck-report", racecheck_report]
    return [tool_path, *options, sys.executable, str(SCRIPT), "--run", "--representatives", representatives,
            "--only", ",".join(ids)]


def child_environment() -> dict[str, str]:
    """This process's environment, the caching allocator off, and this process's lamina first on
    the path, so that the tool runs the same lamina whether or not it is installed."""
    import lamina
    root = str(Path(lamina.__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, **NO_CACHING, "PYTHONPATH": path}


def run_process(command: list[str], timeout: float, deadline: float = math.inf) -> tuple[str, int | None, float]:
    """Run ``command``; stop it where no representative ends for ``timeout`` seconds, or at
    ``deadline`` (``time.monotonic``'s). (output, exit status or None where it was stopped, wall
    seconds)."""
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=child_environment(), start_new_session=True)
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    output, last_progress = [], time.monotonic()
    while True:
        try:
            line = lines.get(timeout=max(0.0, min(last_progress + timeout, deadline) - time.monotonic()))
        except queue.Empty:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return "".join(output), None, time.monotonic() - started
        if line is None:
            break
        output.append(line)
        if line.startswith(sanitizer_output.MARKER):
            last_progress = time.monotonic()
    return "".join(output), process.wait(), time.monotonic() - started


def sanitize(tool: str, found: list[ks.Representative], args: argparse.Namespace, tool_path: str,
             representatives_file: str, deadline: float, log: list[str]) -> tuple[dict[str, dict], list[dict]]:
    """Each program's record under ``tool`` by its first id, and every process run.

    One process runs every program; each finding is its program's by the begin and end lines
    around it. A finding can leave the GPU unusable for the rest of the process (memcheck stops
    a faulting kernel, and the CUDA context fails from then on), so a program that failed after
    another's finding or failure in the same process runs again, first in a new process. A
    process that stops (a hang) leaves the program it stopped in as ``timeout`` and the rest to
    a new process."""
    groups = dict(runs(found))
    records: dict[str, dict] = {}
    processes: list[dict] = []
    pending = list(groups)
    while pending:
        if time.monotonic() > deadline:
            records.update({i: {"verdict": "not-run", "why": "--budget spent"} for i in pending})
            break
        command = tool_command(tool_path, tool, args.racecheck_report, representatives_file,
                               [r.id for i in pending for r in groups[i]])
        text, returncode, wall = run_process(command, args.timeout, deadline)
        spent = returncode is None and time.monotonic() >= deadline
        output = sanitizer_output.parse(text)
        processes.append({"tool": tool, "programs": pending, "returncode": returncode, "wall_s": round(wall, 1),
                          "command": shlex.join(command), "errors": output.errors, "hazards": output.hazards,
                          "findings_outside_programs": list(output.outside)})
        log.append(f"### {tool}, process {len(processes)}: {shlex.join(command)}\n{text}")
        if not output.begun:  # the tool ran nothing: every program's record says why
            for i in pending:
                records[i] = _record(output, returncode, i, wall, command, pending, output.findings)
            break
        retry, troubled = [], False
        for i in pending:
            if i not in output.begun:
                retry.append(i)
                continue
            if spent and i not in output.ended:
                records[i] = {"verdict": "not-run", "why": "--budget spent while it ran"}
                continue
            record = _record(output, returncode, i, wall, command, pending, output.findings_of(i))
            if troubled and i != pending[0] and record["verdict"] in ("failed", "mismatch", "no-summary"):
                retry.append(i)
            else:
                records[i] = record
            troubled = troubled or record["verdict"] not in ("clean", "hazards", "setting-changed")
        pending = retry
    return records, processes


def _record(output: sanitizer_output.ToolOutput, returncode: int | None, first: str, wall: float,
            command: list[str], batch: list[str], lines: tuple[str, ...]) -> dict[str, Any]:
    status, detail = output.ended.get(first, ("not-ended", ""))
    seconds = next((float(w.split("=", 1)[1]) for w in detail.split() if w.startswith("seconds=")), None)
    starts = sanitizer_output.finding_starts(lines)
    return {"verdict": sanitizer_output.verdict(output, returncode, first),
            "findings": len(starts), "warnings": sum(line.startswith("Warning") for line in starts),
            "returncode": returncode, "process_errors": output.errors, "process_hazards": output.hazards,
            "tool_found_errors": returncode == ERROR_EXIT_CODE, "check": status, "detail": detail,
            "first_lines": list(lines), "kernels_named": list(sanitizer_output.kernels_named(lines)),
            "program_seconds": seconds, "process_wall_s": round(wall, 1), "run_with": batch,
            "command": shlex.join(command)}


def sanitize_all(found: list[ks.Representative], about: dict[str, Any], args: argparse.Namespace,
                 argv: list[str]) -> tuple[dict[str, Any], str]:
    """The record, and every process's output as the tool printed it (the log beside the record)."""
    tool_path = find_tool(args.compute_sanitizer)
    started = time.monotonic()
    by_program = {r.id: first for first, group in runs(found) for r in group}
    settings = [r.to_json() for r in found]
    processes: list[dict] = []
    log: list[str] = []
    with tempfile.TemporaryDirectory(prefix="sanitize-") as folder:
        representatives_file = str(Path(folder) / "representatives.json")
        Path(representatives_file).write_text(json.dumps({"enumeration": about,
                                                          "representatives": settings}))
        deadline = started + args.budget
        logs = {tool: [] for tool in args.tools}
        with concurrent.futures.ThreadPoolExecutor(len(args.tools)) as pool:  # the tools do not time anything
            done = {tool: pool.submit(sanitize, tool, found, args, tool_path, representatives_file, deadline,
                                      logs[tool]) for tool in args.tools}
        for tool in args.tools:
            records, ran = done[tool].result()
            processes += ran
            log += logs[tool]
            for entry in settings:
                entry[tool] = records[by_program[entry["id"]]]
    return {
        "command": reproducing_command("sanitize_kernels.py", argv, args.out),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "tool": _version(tool_path), "tools": args.tools, "versions": _versions(),
        "method": "each setting's representative program run once under each tool with random inputs, "
                  "PYTORCH_NO_CUDA_MEMORY_CACHING=1, outputs checked against eager PyTorch at a wider dtype",
        "enumeration": about, "summary": summary(settings, args.tools), "settings": settings,
        "processes": processes,
    }, "\n".join(log)


def summary(settings: list[dict], tools: list[str]) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {}
    for tool in tools:
        for entry in settings:
            verdict = entry[tool]["verdict"]
            counts.setdefault(tool, {})[verdict] = counts.setdefault(tool, {}).get(verdict, 0) + 1
    return counts


def print_summary(document: dict[str, Any]) -> None:
    tools = document["tools"]
    print(f"{'setting':24s} " + " ".join(f"{t:10s}" for t in tools) + " representative")
    for entry in document["settings"]:
        verdicts = " ".join(f"{entry[t]['verdict']:10s}" for t in tools)
        print(f"{entry['id']:24s} {verdicts} {entry['case']}, kernel {entry['kernel']}")
        for t in tools:
            if entry[t]["verdict"] != "clean":
                for line in (entry[t].get("first_lines") or [entry[t].get("detail") or entry[t].get("why", "")])[:3]:
                    print(f"{'':24s}   {t}: {line}")
    for tool, counts in document["summary"].items():
        print(f"{tool}: " + ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items())))
    for process in document["processes"]:
        for line in process["findings_outside_programs"][:3]:
            print(f"{process['tool']}, outside any program: {line}")


def _version(tool_path: str) -> str:
    try:
        text = subprocess.run([tool_path, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return tool_path
    return next((line.strip() for line in text.splitlines() if line.strip().startswith("Version")), tool_path)


def _versions() -> dict[str, str]:
    import torch

    import lamina
    return {"python": sys.version.split()[0], "torch": torch.__version__,
            "lamina": getattr(lamina, "__version__", "unknown"),
            "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none visible"}


def write_results(path: str, document: dict[str, Any]) -> None:
    """Write ``document`` as JSON, replacing the file only once the new one is whole."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(document, f, indent=2)
        f.write("\n")
    os.replace(temporary, target)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    found, about = find_representatives(args)
    if args.list:
        print_list(found, about)
        return 0
    if args.run:
        return run_all(found, args.device)
    document, log = sanitize_all(found, about, args, argv)
    write_results(args.out, document)
    Path(args.out).with_suffix(".log").write_text(log)
    print_summary(document)
    outside = [p for p in document["processes"] if p["findings_outside_programs"]]
    return 0 if not outside and all(e[t]["verdict"] == "clean" for e in document["settings"]
                                    for t in args.tools) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The whole-model suite as many ``lamina bench --models`` processes sharing one GPU, then one record.

    python benchmarks/models_in_parallel.py --processes 12 --out MERGED.json \\
        --filter '*.s128.*' --filter 'vit.b8.*' [--parts DIR] [--replays 100] \\
        [--not-in RECORD.json ...] [--heavy '*.b8.s2048.*' --heavy-processes 2] [--case-timeout S] [--list] \\
        [--selection autotune] [--no-torch-compile] [--no-per-layer]

Each selected case runs in a process of its own (a crash loses that case alone), at most
``--processes`` at once: the cases of the first ``--filter`` first, and within each filter's
cases the costliest first, so that the last to finish are short. The processes
compile at once and take turns to measure (``--measure-lock``): no timing, kernel count or memory
peak sees another process's work. Each case's record lands in ``--parts`` as it finishes, and the
merged record (``merge_model_results.py``) is rewritten after every case, so a run cut short keeps
what it measured. A GPU test run can share the turns: ``flock PARTS/lock python -m pytest -m gpu``.

``--not-in`` leaves out the cases that earlier records measured; ``--case-timeout`` stops a case
that runs longer (its log says so), so that a stuck one cannot hold the turns of the rest. The cases of a ``--heavy``
pattern (batch 8 at 2048 tokens holds tens of GB of logits and references) run at most
``--heavy-processes`` at once, while the other processes go on with the rest of the queue.
``--list`` prints the queue and runs nothing.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import fnmatch
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from merge_model_results import merge

from lamina.bench.model_suite import bench_layers, model_cases

COMPILE_WEIGHT = {"qwen3": 2.1, "llama": 1.7}
"""How much longer than a typical architecture each takes to compile: lamina cold and warm plus
Inductor, Qwen3's 28 layers about 2.1x GPT-2's 12 and TinyLlama's 22 about 1.7x
(``benchmarks/results/2026-12-06_h200_models_b1_s512_bf16.json``)."""


def cost(case) -> float:
    """A rough order for the queue: compile work, plus the measured work of long, wide inputs."""
    return COMPILE_WEIGHT.get(case.arch.name, 1.0) + case.batch * case.length / 4096


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--filter", action="append", required=True, metavar="PATTERN")
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--replays", type=int, default=100)
    parser.add_argument("--parts", default=None, help="where each case's record goes (default: beside --out)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--not-in", action="append", default=[], metavar="RECORD",
                        help="leave out the cases this record measured (repeatable)")
    parser.add_argument("--heavy", action="append", default=[], metavar="PATTERN",
                        help="cases that run at most --heavy-processes at once (repeatable)")
    parser.add_argument("--heavy-processes", type=int, default=2)
    parser.add_argument("--selection", help="passed on to each lamina bench (autotune: the tuned settings)")
    parser.add_argument("--no-torch-compile", action="store_true", help="passed on to each lamina bench")
    parser.add_argument("--no-per-layer", action="store_true", help="passed on to each lamina bench")
    parser.add_argument("--case-timeout", type=float, default=1200.0, metavar="SECONDS",
                        help="stop a case's process after this long (default %(default)s)")
    parser.add_argument("--list", action="store_true", help="print the queue and run nothing")
    args = parser.parse_args()
    def tier(case) -> int:
        return next((k for k, p in enumerate(args.filter) if fnmatch.fnmatchcase(case.name, p)), -1)

    measured = {c["name"] for record in args.not_in for c in json.loads(Path(record).read_text())["cases"]
                if c["status"] == "ok"}
    cases = [c for c in model_cases(bench_layers()) if tier(c) >= 0 and c.name not in measured]
    cases.sort(key=lambda c: (tier(c), -cost(c)))
    heavy = {c.name for c in cases if any(fnmatch.fnmatchcase(c.name, p) for p in args.heavy)}
    if args.list:
        for case in cases:
            print(case.name + ("  (heavy)" if case.name in heavy else ""))
        return
    parts = Path(args.parts or Path(args.out).with_suffix(".parts"))
    parts.mkdir(parents=True, exist_ok=True)
    lock = parts / "lock"
    passed_on = (["--selection", args.selection] if args.selection else []) + \
        [flag for flag, given in (("--no-torch-compile", args.no_torch_compile), ("--no-per-layer", args.no_per_layer))
         if given]
    merging = threading.Lock()
    start = time.time()

    def run(case) -> str:
        record = parts / f"{case.name}.json"
        command = ["lamina", "bench", "--models", "--filter", case.name, "--replays", str(args.replays),
                   "--measure-lock", str(lock), "--out", str(record)] + passed_on
        with open(parts / f"{case.name}.txt", "w") as log:
            code = run_case(command, log, args.case_timeout)
        with merging:
            found = [json.loads(p.read_text()) for p in sorted(parts.glob("*.json"))]
            if found:
                Path(args.out).write_text(json.dumps(merge(found), indent=2) + "\n")
        return f"{time.time() - start:7.0f} s  {case.name}: {code}"

    print(f"{len(cases)} case(s) in {args.processes} processes, {len(heavy)} of them heavy", flush=True)
    for line in run_in_turns(cases, run, args.processes, lambda c: c.name in heavy, args.heavy_processes):
        print(line, flush=True)


def run_case(command: list[str], log, timeout: float) -> str:
    """Run one case's process, its output to ``log``; ``exit N``, or ``stopped after T s`` where it ran
    longer than ``timeout`` (it and its children are killed: a stuck case must not keep the GPU's
    turns from the others)."""
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        return f"exit {process.wait(timeout=timeout)}"
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        log.write(f"\nmodels_in_parallel: stopped after {timeout:.0f} s\n")
        return f"stopped after {timeout:.0f} s"


def run_in_turns(cases: list, run, processes: int, is_heavy, heavy_processes: int):
    """``run(case)`` for each case, ``processes`` at once and at most ``heavy_processes`` of the heavy ones:
    each free slot takes the first waiting case it may start. Yields what each run returns, as they finish."""
    waiting = list(cases)
    running: dict[concurrent.futures.Future, object] = {}
    with concurrent.futures.ThreadPoolExecutor(processes) as pool:
        while waiting or running:
            heavy_running = sum(1 for case in running.values() if is_heavy(case))
            startable = next((c for c in waiting if not is_heavy(c) or heavy_running < heavy_processes), None)
            if startable is not None and len(running) < processes:
                waiting.remove(startable)
                running[pool.submit(run, startable)] = startable
                continue
            done, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in done:
                del running[future]
                yield future.result()

if __name__ == "__main__":
    sys.exit(main())

"""``python -m lamina.testing.fuzz --seeds N [--start S] [--dtype D] [--jobs J]``, or ``--seed S`` for one.

Prints a progress line as it goes and a summary at the end: how many programs passed,
mismatched, crashed, were refused by a ScheduleError, or were invalid (eager PyTorch
failed: the generator's fault), and each failure's seed, error and source. Exits 1 when
anything did not pass.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from collections import Counter

from lamina.testing.fuzz.generator import generate
from lamina.testing.fuzz.runner import OUTCOMES, Outcome, run, run_seed, single_thread
from lamina.testing.fuzz.writer import DTYPES


def _command(outcome: Outcome, dtype_given: bool) -> str:
    dtype = f" --dtype {outcome.program.dtype}" if dtype_given else ""
    return f"python -m lamina.testing.fuzz --seed {outcome.program.seed}{dtype}"


def _report(outcome: Outcome, dtype_given: bool) -> str:
    program = outcome.program
    return "\n".join([
        f"=== seed {program.seed} ({program.dtype}): {outcome.kind}   [{_command(outcome, dtype_given)}]",
        outcome.detail, "", program.repro(), "",
    ])


def _counts(counts: Counter) -> str:
    return ", ".join(f"{counts[kind]} {kind}" for kind in OUTCOMES)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lamina.testing.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=100, help="how many programs to run (default 100)")
    parser.add_argument("--start", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--seed", type=int, help="run this one seed and print its program")
    parser.add_argument("--dtype", choices=DTYPES, help="every program in this dtype (default: chosen by the seed)")
    parser.add_argument("--jobs", type=int, default=1, help="programs run at once, one process each (default 1)")
    parser.add_argument("--every", type=int, default=25, help="print a progress line every this many programs")
    args = parser.parse_args(argv)

    if args.seed is not None:
        outcome = run(generate(args.seed, args.dtype))
        print(outcome.program.repro())
        print(f"\nseed {args.seed}: {outcome.kind} in {outcome.seconds:.2f} s")
        if outcome.detail:
            print(outcome.detail)
        return 0 if outcome.kind == "passed" else 1

    tasks = [(seed, args.dtype) for seed in range(args.start, args.start + args.seeds)]
    counts: Counter = Counter()
    failures: list[Outcome] = []
    started = time.perf_counter()
    if args.jobs > 1:
        pool = multiprocessing.get_context("spawn").Pool(args.jobs, initializer=single_thread)
        results = pool.imap_unordered(run_seed, tasks)
    else:
        pool, results = None, map(run_seed, tasks)
    try:
        for done, outcome in enumerate(results, 1):
            counts[outcome.kind] += 1
            if outcome.kind != "passed":
                failures.append(outcome)
                print(f"seed {outcome.program.seed} ({outcome.program.dtype}): {outcome.kind}", flush=True)
            if done % args.every == 0 or done == len(tasks):
                print(f"[{done}/{len(tasks)}] {_counts(counts)}  {time.perf_counter() - started:.0f} s", flush=True)
    except BaseException:
        if pool is not None:
            pool.terminate()
        raise
    if pool is not None:
        pool.close()
        pool.join()
    for outcome in sorted(failures, key=lambda o: o.program.seed):
        print("\n" + _report(outcome, args.dtype is not None))
    print(f"seeds {args.start}..{args.start + args.seeds - 1}: {len(tasks)} programs, {_counts(counts)} "
          f"in {time.perf_counter() - started:.0f} s")
    return 0 if counts["passed"] == len(tasks) else 1


if __name__ == "__main__":
    sys.exit(main())

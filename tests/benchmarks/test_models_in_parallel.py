"""The queue of benchmarks/models_in_parallel.py: how many cases run at once, heavy ones included, and
a case that runs too long."""

import sys
import threading
import time

from models_in_parallel import run_case, run_in_turns


def test_at_most_the_given_processes_and_heavy_ones_run_at_once():
    cases = ["heavy-1", "heavy-2", "heavy-3", "light-1", "light-2", "light-3", "light-4"]
    running, most, most_heavy, guard = set(), [0], [0], threading.Lock()

    def run(case):
        with guard:
            running.add(case)
            most[0] = max(most[0], len(running))
            most_heavy[0] = max(most_heavy[0], sum(1 for c in running if c.startswith("heavy")))
        time.sleep(0.05)
        with guard:
            running.discard(case)
        return case

    done = list(run_in_turns(cases, run, 3, lambda c: c.startswith("heavy"), 1))
    assert sorted(done) == sorted(cases)
    assert most[0] == 3 and most_heavy[0] == 1


def test_a_slot_that_may_not_take_a_heavy_case_takes_the_next_light_one():
    started = []

    def run(case):
        started.append(case)
        time.sleep(0.05)
        return case

    list(run_in_turns(["heavy-1", "heavy-2", "light-1"], run, 2, lambda c: c.startswith("heavy"), 1))
    assert set(started[:2]) == {"heavy-1", "light-1"}


def test_a_case_that_runs_too_long_is_stopped_with_its_children(tmp_path):
    """A stuck case (here a process whose child sleeps) is killed, and its log says so."""
    child = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); " \
            "print('started', flush=True); time.sleep(60)"
    log_path = tmp_path / "case.txt"
    started = time.monotonic()
    with open(log_path, "w") as log:
        outcome = run_case([sys.executable, "-c", child], log, timeout=3)
    assert outcome == "stopped after 3 s" and time.monotonic() - started < 30
    assert log_path.read_text().splitlines()[-1] == "models_in_parallel: stopped after 3 s"
    with open(log_path, "w") as log:
        assert run_case([sys.executable, "-c", "print('done')"], log, timeout=30) == "exit 0"

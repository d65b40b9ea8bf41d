"""Threads of a block that wait for each other on mbarriers, run as cooperative tasks.

The simulator runs a kernel's threads in lockstep, an ``If`` running its two branches one after
the other. That cannot run a warp-specialised kernel, whose producer branch waits on an mbarrier
for the consumer branch to release a stage: so, in a kernel that waits on mbarriers, the two
branches of an ``If`` in which a branch waits run as two tasks, each with its own variables,
and the threads meet again after the ``If`` (the variables that a branch assigned are merged
back, each thread keeping its branch's value). One task runs at a time, on a Python thread of
its own: it runs until its threads wait on a phase that has not completed, and a task whose
arrival completes a phase lets the tasks that waited for it run first, which is the order that
shows a stage released too early. When every task waits and none can go on, no thread of the
GPU could either: that is a deadlock, reported with what each one waits for.

Threads that reach one wait together (a warpgroup, or the same role in every block) go on
together, once all of them can; roles that wait on each other must be the branches of one ``If``.
"""

from __future__ import annotations

import threading
from typing import Callable, Protocol

import torch

from lamina.backends.reference.simulator.grid import Mask
from lamina.core.errors import SimulationError


class Waiting(Protocol):
    """What a blocked task waits for."""

    def ready(self) -> bool: ...

    def describe(self) -> str | None:
        """Words for the deadlock report; None for a task waiting for its own branches."""


class TaskVariables:
    """The variables of the running task: the simulator's closures see one dict, which is the
    running task's."""

    def __init__(self):
        self.current: dict[str, torch.Tensor] = {}

    def __getitem__(self, name):
        return self.current[name]

    def __setitem__(self, name, value):
        self.current[name] = value

    def __contains__(self, name):
        return name in self.current

    def get(self, name, default=None):
        return self.current.get(name, default)

    def update(self, pairs):
        self.current.update(pairs)


class _Aborted(Exception):
    """Unwinds a task whose simulation failed elsewhere."""


class _Task:
    def __init__(self, variables: dict, mask: Mask | None = None):
        self.variables = variables
        self.mask = mask
        self.waiting: Waiting | None = None
        self.done = False
        self.thread: threading.Thread | None = None


class _Branches:
    def __init__(self, children: list[_Task]):
        self.children = children

    def ready(self) -> bool:
        return all(child.done for child in self.children)

    def describe(self) -> None:
        return None


class Tasks:
    """The tasks of one launch; the thread that calls ``simulate`` runs the first."""

    def __init__(self, variables: TaskVariables, kernel: str):
        self.variables, self.kernel = variables, kernel
        self.condition = threading.Condition()
        self.main = _Task(variables.current)
        self.order = [self.main]
        self.running = self.main
        self.failure: BaseException | None = None

    def fork(self, branches: list[tuple[Callable[[Mask], None], Mask]]) -> None:
        """Run each branch on its threads as a task of its own; return when all are done."""
        parent = self.running
        children = [_Task(dict(parent.variables), mask) for _, mask in branches]
        for child, (runner, mask) in zip(children, branches):
            child.thread = threading.Thread(target=self._run, args=(child, runner, mask), daemon=True)
        at = self.order.index(parent) + 1
        self.order[at:at] = children
        for child in children:
            child.thread.start()
        self.block(_Branches(children))
        for child in children:
            self.order.remove(child)
        self._merge(parent, children)

    def block(self, waiting: Waiting) -> None:
        """The running task waits until ``waiting`` is ready, the others running meanwhile."""
        if waiting.ready():
            return
        me = self.running
        me.waiting = waiting
        self._hand_on(me)
        self._wait_for_turn(me)
        me.waiting = None

    def let_others_run(self) -> None:
        """A phase completed: the tasks that waited for it run before the running one goes on."""
        me = self.running
        self._hand_on(me)
        self._wait_for_turn(me)

    def _run(self, task: _Task, runner, mask: Mask) -> None:
        try:
            self._wait_for_turn(task)
            runner(mask)
            task.done = True
            self._hand_on(task)
        except _Aborted:
            return
        except BaseException as error:  # handed to the thread that called simulate
            with self.condition:
                if self.failure is None:
                    self.failure = error
                self.condition.notify_all()

    def _wait_for_turn(self, me: _Task) -> None:
        with self.condition:
            while self.running is not me and self.failure is None:
                self.condition.wait()
        if self.failure is not None:
            if me is self.main:
                self._stop_all()
                raise self.failure
            raise _Aborted()

    def _hand_on(self, me: _Task) -> None:
        """Give the turn to the next task that can run, in order after ``me`` (``me`` last)."""
        at = self.order.index(me) if me in self.order else 0
        candidates = self.order[at + 1:] + self.order[:at] + ([me] if not me.done else [])
        chosen = next((t for t in candidates if not t.done and (t.waiting is None or t.waiting.ready())), None)
        if chosen is None:
            error = SimulationError(self._deadlock())
            with self.condition:
                self.failure = error
                self.condition.notify_all()
            if me is self.main:
                self._stop_all()
                raise error
            raise _Aborted()
        with self.condition:
            self.running = chosen
            self.variables.current = chosen.variables
            self.condition.notify_all()

    def _stop_all(self) -> None:
        with self.condition:
            if self.failure is None:
                self.failure = SimulationError(f"kernel {self.kernel}: the simulation stopped")
            self.condition.notify_all()
        for task in self.order:
            if task.thread is not None and task.thread is not threading.current_thread():
                task.thread.join()

    def _deadlock(self) -> str:
        waits = [text for task in self.order if task.waiting is not None and (text := task.waiting.describe())]
        return (f"kernel {self.kernel}: deadlock: every thread waits and none can go on, so on the GPU the kernel "
                "would hang:\n    " + "\n    ".join(waits) + "\nCheck the arrival counts of the barriers' init, the "
                "transaction bytes each arrive expects (the whole box of every copy completing on it), and the "
                "parities waited for.")

    @staticmethod
    def _merge(parent: _Task, children: list[_Task]) -> None:
        """The variables that branches assigned, each thread taking its own branch's value."""
        for name, value in list(parent.variables.items()):
            changed = [c for c in children if c.variables.get(name) is not value]
            if len(changed) == 1:
                parent.variables[name] = changed[0].variables[name]
            elif changed:
                merged = value
                for child in changed:
                    merged = torch.where(child.mask.active, child.variables[name], merged)
                parent.variables[name] = merged

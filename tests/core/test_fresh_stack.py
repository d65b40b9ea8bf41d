"""The pipeline's stages run on a thread of their own, whatever the depth of the caller's stack:
with the caller's context (the sizes' hints), its result or its error handed back."""

import threading

import pytest
import torch

from lamina.api import Compiler
from lamina.core.errors import ScheduleError
from lamina.core.fresh_stack import on_fresh_stack
from lamina.core.hookspecs import hookimpl
from lamina.core.ir import sizes


def test_work_runs_on_another_thread_and_hands_back_its_result():
    caller = threading.get_ident()
    assert on_fresh_stack(lambda: (threading.get_ident() != caller, 7 * 6)) == (True, 42)


def test_an_error_is_raised_on_the_callers_thread_as_it_was_raised():
    def fails():
        raise ScheduleError("kernel add: no setting runs")

    with pytest.raises(ScheduleError, match="no setting runs") as raised:
        on_fresh_stack(fails)
    assert "fails" in [entry.name for entry in raised.traceback], "the traceback reaches where it was raised"


def test_the_callers_context_variables_are_seen_and_its_own_are_left_as_they_were():
    with sizes.hinted({"s0": 37}):
        assert on_fresh_stack(lambda: dict(sizes.hints())) == {"s0": 37}

        def changes():
            with sizes.hinted({"s0": 5}):
                return dict(sizes.hints())

        assert on_fresh_stack(changes) == {"s0": 5}
        assert dict(sizes.hints()) == {"s0": 37}


class ThreadWatcher:
    def __init__(self):
        self.threads = {}

    @hookimpl
    def lamina_observe_ir(self, level, ir, compilation):
        self.threads[level] = threading.current_thread().name


def _deep(depth, work):
    return work() if depth == 0 else _deep(depth - 1, work)


@pytest.mark.parametrize("depth", [0, 150])
def test_a_compile_called_from_a_deep_stack_runs_its_stages_on_a_fresh_one(depth):
    watcher = ThreadWatcher()
    compiler = Compiler(program_cache=False)
    compiler.plugins.pm.register(watcher)
    try:
        compiled = _deep(depth, lambda: compiler.compile(lambda x: torch.relu(x) * 2, (torch.randn(5, 7),)))
    finally:
        compiler.plugins.pm.unregister(watcher)
    stages = ("tensor", "loop", "tile", "kernel")
    assert {level: watcher.threads[level] for level in stages} == dict.fromkeys(stages, "lamina-compile")
    assert watcher.threads["torch"] == threading.current_thread().name
    x = torch.randn(5, 7)
    torch.testing.assert_close(compiled(x), torch.relu(x) * 2)

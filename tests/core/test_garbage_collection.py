"""The cycle collector is paused while a program compiles, and left as it was afterwards."""

import gc

import pytest
import torch

from lamina.api import Compiler
from lamina.core.garbage_collection import cycle_collector_paused
from lamina.core.hookspecs import hookimpl


@pytest.fixture
def collector_enabled():
    was = gc.isenabled()
    gc.enable()
    yield
    gc.enable() if was else gc.disable()


def test_nested_pauses_end_with_the_collector_as_it_was(collector_enabled):
    with cycle_collector_paused():
        with cycle_collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_turned_off_by_the_user_stays_off(collector_enabled):
    gc.disable()
    with cycle_collector_paused():
        pass
    assert not gc.isenabled()


def test_an_error_inside_still_ends_the_pause(collector_enabled):
    with pytest.raises(ValueError):
        with cycle_collector_paused():
            raise ValueError("a failed compile")
    assert gc.isenabled()


class CollectorWatcher:
    """Notes whether the collector runs while each level of a compile is made."""

    def __init__(self):
        self.enabled = []

    @hookimpl
    def lamina_observe_ir(self, level, ir, compilation):
        self.enabled.append((level, gc.isenabled()))


def test_a_compile_runs_its_stages_with_the_collector_paused(collector_enabled):
    watcher = CollectorWatcher()
    compiler = Compiler(program_cache=False)
    compiler.plugins.pm.register(watcher)
    try:
        compiled = compiler.compile(lambda x: torch.relu(x) * 2, (torch.randn(5, 7),))
    finally:
        compiler.plugins.pm.unregister(watcher)
    x = torch.randn(5, 7)
    torch.testing.assert_close(compiled(x), torch.relu(x) * 2)
    assert [level for level, _ in watcher.enabled][:2] == ["torch", "tensor"]
    assert not any(enabled for _, enabled in watcher.enabled)
    assert gc.isenabled()

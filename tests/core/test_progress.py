"""lamina.core.progress: a line on the terminal while a compile runs long, and none elsewhere."""

import io

import torch

import lamina
from lamina.core import progress
from lamina.core.progress import CompileProgress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_long_compile_shows_its_stage_and_kernels_on_a_terminal_and_wipes_the_line(monkeypatch):
    monkeypatch.setattr(progress, "SHOW_AFTER_S", 0.0)
    monkeypatch.setattr(progress, "REDRAW_S", 0.0)
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    lamina.compile(lambda x: torch.softmax(x @ x.T, -1).sum(0), (torch.randn(33, 20),))
    shown = terminal.getvalue()
    assert "\r\033[Klamina: compiling for " in shown and " s: fusion" in shown
    assert ": scheduling, 0 of " in shown and ": lowering to kernels, 0 of " in shown
    assert shown.endswith("\r\033[K")


def test_a_short_compile_and_a_stream_that_is_no_terminal_stay_quiet():
    quiet = Terminal()
    line = CompileProgress(True, quiet)
    line.update("fusion")  # within the first SHOW_AFTER_S seconds
    line.done()
    assert quiet.getvalue() == ""
    log = io.StringIO()
    assert not CompileProgress(True, log).enabled and not CompileProgress(False, Terminal()).enabled

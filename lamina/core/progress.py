"""A line on the terminal while a compile runs long: its stage, and the kernels done of all.

A whole model takes tens of seconds to compile; without a sign of life a user cannot tell a
slow compile from a stuck one. The line shows only on a terminal, only once the compile has
run ``SHOW_AFTER_S`` seconds, and is wiped when it ends; the ``progress`` setting turns it off.
"""

from __future__ import annotations

import sys
import time
from typing import IO

SHOW_AFTER_S = 2.0
"""Seconds a compile runs before its line appears: a short compile stays quiet."""
REDRAW_S = 0.1
"""The line is redrawn at most this often within a stage."""


class CompileProgress:
    """The progress line of one compile (``Pipeline.compile`` makes one and wipes it at the end)."""

    def __init__(self, enabled: bool, stream: IO[str] | None = None):
        self.stream = sys.stderr if stream is None else stream
        self.enabled = enabled and _is_terminal(self.stream)
        self.started = self.drawn_at = time.perf_counter()
        self.stage = ""
        self.shown = False

    def update(self, stage: str, done: int | None = None, total: int | None = None) -> None:
        """The compile is in ``stage`` (with ``done`` of ``total`` kernels, where it counts them)."""
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self.started < SHOW_AFTER_S or (stage == self.stage and now - self.drawn_at < REDRAW_S):
            return
        kernels = f", {done} of {total} kernels" if total else ""
        self.stream.write(f"\r\033[Klamina: compiling for {now - self.started:.0f} s: {stage}{kernels}")
        self.stream.flush()
        self.stage, self.drawn_at, self.shown = stage, now, True

    def done(self) -> None:
        """Wipe the line, if it was shown."""
        if self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self.shown = False


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or minimal stream is no terminal
        return False

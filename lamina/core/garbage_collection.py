"""Python's cycle collector paused while a compile builds its IR.

A model's compile makes and drops millions of small IR objects. Each of them counts towards the
cycle collector's next pass, and each pass of the oldest generation walks every object alive, the
whole program's IR included: TinyLlama's compile spent a quarter of its pipeline in those passes,
and loading it from the program cache (hundreds of thousands of objects unpickled) four fifths
(``experiments/compile_time/``). The IR holds no reference cycles (frozen values that refer
downwards only), so reference counting frees it as before; the collector runs again when the
compile is done, and then finds what little cyclic garbage the compile left.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from typing import Iterator

_lock = threading.Lock()
_pauses = 0
_was_enabled = False


@contextlib.contextmanager
def cycle_collector_paused() -> Iterator[None]:
    """The cycle collector off within the block (nested and concurrent blocks alike), and as it
    was before the first of them once the last one ends."""
    global _pauses, _was_enabled
    with _lock:
        if _pauses == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _lock:
            _pauses -= 1
            if _pauses == 0 and _was_enabled:
                gc.enable()

"""Work run on a thread of its own, on a fresh interpreter stack.

CPython keeps a thread's frames in chunks of memory; a call whose frame does not fit in the
current chunk maps a new one, and its return unmaps it. Where a compile's caller leaves the stack
just short of a chunk's end (lamina under ``torch.compile``, with Dynamo's and AOTAutograd's frames
below it), every call of the pipeline's innermost loops that crosses the end maps and unmaps a
chunk, a page fault each time: lamina's part of TinyLlama's compile took twice as long there
(``experiments/compile_time/RESULTS.md``). A new thread starts at the start of a chunk, whoever
calls, for a tenth of a millisecond.
"""

from __future__ import annotations

import contextvars
import sys
import threading
from typing import Callable, TypeVar

T = TypeVar("T")


def on_fresh_stack(work: Callable[[], T]) -> T:
    """``work()`` run on a new thread, in a copy of the caller's context variables (the sizes'
    hints) and on the caller's current CUDA device (where a plugin measures on the GPU); its
    result, or its exception raised here. The caller waits for it."""
    context = contextvars.copy_context()
    device = _current_cuda_device()
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            if device is not None:
                sys.modules["torch"].cuda.set_device(device)
            outcome["result"] = context.run(work)
        except BaseException as error:  # raised again on the caller's thread
            outcome["error"] = error

    thread = threading.Thread(target=run, name="lamina-compile", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["result"]  # type: ignore[return-value]


def _current_cuda_device() -> int | None:
    """The caller's current CUDA device, where PyTorch has set CUDA up (a new thread's is the first)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    return torch.cuda.current_device()

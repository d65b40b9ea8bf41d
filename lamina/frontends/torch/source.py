"""The user's source line of a captured node, read from the stack trace that export records.

A trace runs from the outermost frame to the innermost; the line that matters to a
person is the innermost one in their own code, not in PyTorch or in lamina.
"""

from __future__ import annotations

import functools
import linecache
import os
import re
from pathlib import Path

import torch

from lamina.core.ir.torch_ir import SourceLocation

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in ')
_MARKERS = re.compile(r"^[\s^~]*$")
_NOT_USER_CODE = tuple(
    str(package) + os.sep for package in (Path(torch.__file__).resolve().parent, Path(__file__).resolve().parents[2])
)


@functools.lru_cache(maxsize=4096)
def is_user_file(path: str) -> bool:
    """Whether ``path`` is the user's code: neither PyTorch's nor lamina's."""
    return not os.path.realpath(path).startswith(_NOT_USER_CODE)


@functools.lru_cache(maxsize=4096)
def source_location(stack_trace: str | None) -> SourceLocation | None:
    """The innermost frame of ``stack_trace`` in the user's code, or None when there is none (kept per
    trace: a model's layers run the same lines, and each op of each layer carries its trace)."""
    if not stack_trace:
        return None
    lines = stack_trace.splitlines()
    frames = []
    for k, text in enumerate(lines):
        match = _FRAME.match(text)
        if match is None:
            continue
        following = lines[k + 1] if k + 1 < len(lines) else ""
        code = "" if _FRAME.match(following) or _MARKERS.match(following) else following.strip()
        frames.append((match["file"], int(match["line"]), code))
    for file, line, code in reversed(frames):
        if is_user_file(file):
            return SourceLocation(file, line, code or linecache.getline(file, line).strip())
    return None

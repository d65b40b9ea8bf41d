"""The closest valid name to one lamina does not know, for messages that say what was meant."""

from __future__ import annotations

import difflib
from typing import Iterable

CUTOFF = 0.6
"""difflib's default likeness: ``blok_k`` finds ``block_k``, ``foo`` finds nothing."""


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known name most like ``name``, or None when none is alike enough."""
    matches = difflib.get_close_matches(name, sorted(set(known)), n=1, cutoff=CUTOFF)
    return matches[0] if matches else None


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest known name, or nothing when none is alike."""
    match = closest(name, known)
    return f" (did you mean {match!r}?)" if match is not None else ""

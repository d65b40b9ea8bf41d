"""Knobs pinned under their old spellings: accepted for one release with a
``FutureWarning`` that names the new spelling, then read as the new one."""

from __future__ import annotations

import warnings
from typing import Any, Callable, Mapping

import attrs


@attrs.frozen
class Renamed:
    """Knob ``old`` is now ``new``; ``value`` turns an old value into the new one (None: the same)."""

    old: str
    new: str
    value: Callable[[Any], Any] | None = None
    values_note: str = ""


def with_new_spellings(knobs: Mapping[str, Any], renames: tuple[Renamed, ...]) -> dict[str, Any]:
    """``knobs`` with every old spelling in ``renames`` read as its new one, each with a warning;
    a knob pinned under both spellings keeps the new one's value."""
    result = dict(knobs)
    for r in renames:
        if r.old not in knobs:
            continue
        old_value = result.pop(r.old)
        new_value = r.value(old_value) if r.value is not None else old_value
        note = f" ({r.values_note})" if r.values_note else ""
        warnings.warn(f"knob {r.old} is now {r.new}{note}: pin {r.new} = {new_value!r}; the old spelling will be "
                      "refused in the next release", FutureWarning, stacklevel=3)
        result.setdefault(r.new, new_value)
    return result

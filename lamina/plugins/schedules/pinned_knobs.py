"""Reading a schedule's pinned knobs: each a value the schedule can take, or an error that says which."""

from __future__ import annotations

from typing import Any, Mapping

from lamina.core.errors import ScheduleError


def pinned_values(knobs: Mapping[str, Any], legal: Mapping[str, tuple], where: str) -> dict[str, Any]:
    """The knobs of ``knobs`` that ``legal`` names, each checked to be one of its legal values (a
    ``ScheduleError`` at ``where`` naming them where one is not; True and False are never numbers)."""
    pinned = {}
    for name, values in legal.items():
        value = knobs.get(name)
        if value is None:
            continue
        if value not in values or isinstance(value, bool):
            raise ScheduleError(f"{where}: knob {name} = {value!r} must be one of {', '.join(map(str, values))}")
        pinned[name] = value
    return pinned

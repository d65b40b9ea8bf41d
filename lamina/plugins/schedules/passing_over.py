"""How a schedule that finds no setting for a kernel hands it to the next schedule."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from lamina.core.errors import NoSettingRuns, ScheduleError
from lamina.core.ir import tile_ir


def tile_or_pass_over(make_tile: Callable[[], tile_ir.TileKernel], knobs: Mapping[str, Any]) -> tile_ir.TileKernel:
    """``make_tile()``; where no setting can run the kernel and none of the schedule's knobs is
    pinned, ``NoSettingRuns``, so that the next schedule takes it (a pinned knob that no setting
    can honour stays the error it is)."""
    try:
        return make_tile()
    except NoSettingRuns:
        raise
    except ScheduleError as e:
        if knobs:
            raise
        raise NoSettingRuns(str(e)) from None

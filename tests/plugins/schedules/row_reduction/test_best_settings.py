"""The row-reduction schedule's best settings: its own decisions first, then other thread counts
and the row kept in registers or not, each of which its knobs, pinned, reproduce (what the
autotuner measures)."""

import attrs
import pytest

from lamina.plugins.schedules.row_reduction import RowReductionSchedule
from lamina.plugins.schedules.row_reduction.recognise import analyse
from lamina.plugins.schedules.row_reduction.tiling import decide

from .programs import rms_norm, softmax
from .test_recognise import first_kernel
from .test_tiling import SM_90

SCHEDULE = RowReductionSchedule()


@pytest.mark.parametrize("fn, shapes", [(rms_norm, [(512, 2048), (2048,)]), (softmax, [(7, 3000)]),
                                        (softmax, [(4096, 100)])], ids=["rms_norm", "few-long-rows", "short-rows"])
def test_each_best_setting_pinned_is_the_setting_the_schedule_takes(fn, shapes):
    kernel = first_kernel(fn, *shapes)
    settings = SCHEDULE.best_settings(kernel, SM_90, 4)
    assert 2 <= len(settings) <= 4 and all(s.schedule == "row_reduction" for s in settings)
    assert settings[0].estimate_us == pytest.approx(SCHEDULE.estimate_cost(kernel, SM_90))
    assert [s.estimate_us for s in settings[1:]] == sorted(s.estimate_us for s in settings[1:])
    own = SCHEDULE.schedule(kernel, SM_90, {})
    tiles = [SCHEDULE.schedule(kernel, SM_90, dict(s.knobs)) for s in settings]
    assert tiles[0] == own
    assert len({(t.grid, t.knobs, t.vector_width) for t in tiles}) == len(tiles)
    row = analyse(kernel)
    for s in settings:
        assert attrs.asdict(decide(row, SM_90, dict(s.knobs))) == dict(s.knobs)

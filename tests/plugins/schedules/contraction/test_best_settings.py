"""The contraction schedule's best settings: each one's knobs, pinned, make the schedule choose it,
the first is its own choice, and they come cheapest first (what the autotuner measures)."""

import pytest

from lamina.core.ir import dtypes
from lamina.plugins.schedules.contraction import ContractionSchedule

from ..contraction_kernels import SM_90
from .test_symbolic_rows import linear


def chosen(tile) -> str:
    return dict(tile.knobs)["chosen"].split(";")[0]


@pytest.mark.parametrize("rows, k, n, dtype", [(512, 2048, 5632, dtypes.bfloat16), (1, 2048, 2048, dtypes.bfloat16),
                                                (37, 300, 70, dtypes.float32)])
def test_each_best_setting_pinned_is_the_setting_the_schedule_takes(rows, k, n, dtype):
    schedule, kernel = ContractionSchedule(), linear(rows, k, n, dtype).kernel
    settings = schedule.best_settings(kernel, SM_90, 5)
    assert len(settings) == 5 and all(s.schedule == "contraction" for s in settings)
    assert [s.estimate_us for s in settings] == sorted(s.estimate_us for s in settings)
    assert chosen(schedule.schedule(kernel, SM_90, dict(settings[0].knobs))) == chosen(schedule.schedule(kernel, SM_90, {}))
    assert settings[0].estimate_us == pytest.approx(schedule.estimate_cost(kernel, SM_90))
    summaries = [chosen(schedule.schedule(kernel, SM_90, dict(s.knobs))) for s in settings]
    assert len(set(summaries)) == 5
    for s, summary in zip(settings, summaries):
        knobs = dict(s.knobs)
        assert summary.startswith(f"block {knobs['block_m']}x{knobs['block_n']}x{knobs['block_k']}")

"""A product and its softmax in one kernel that no setting can run go to the next schedule,
unless a knob of matmul_row_reduction is pinned."""

import attrs
import pytest
import torch

import lamina
from lamina.core.errors import NoSettingRuns, ScheduleError
from lamina.plugins.schedules.matmul_row_reduction.plugin import MatmulRowReductionSchedule


def scores(q, k):
    return torch.softmax(q @ k.t(), -1)


@pytest.fixture(scope="module")
def fused():
    """The fused kernel of the scores' softmax and the target it was compiled for."""
    compiled = lamina.compile(scores, (torch.randn(64, 32), torch.randn(64, 32)))
    (tile,) = compiled.compilation.tiles
    assert tile.schedule == "matmul_row_reduction"
    return tile.kernel, compiled.compilation.target


def test_without_pins_a_kernel_no_setting_can_run_is_passed_on(fused):
    kernel, target = fused
    little = attrs.evolve(target, max_shared_bytes_optin=16)
    with pytest.raises(NoSettingRuns, match="matmul_row_reduction schedule"):
        MatmulRowReductionSchedule().schedule(kernel, little, {})


def test_a_pinned_knob_keeps_it_an_error(fused):
    kernel, target = fused
    little = attrs.evolve(target, max_shared_bytes_optin=16)
    with pytest.raises(ScheduleError, match="block_k = 8") as raised:
        MatmulRowReductionSchedule().schedule(kernel, little, {"block_k": 8})
    assert not isinstance(raised.value, NoSettingRuns)

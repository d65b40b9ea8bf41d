"""Both attention schedules' best settings: their own choice first, then the next cheapest, each of
which its knobs, pinned, reproduce (what the autotuner measures)."""

import attrs
import pytest

import lamina
from lamina.backends.cuda.targets import SM90
from lamina.plugins.schedules.attention.plugin import AttentionSchedule, DecodeAttentionSchedule

from .test_attention import attention, causal_attention, qkv
from .test_decode_attention import decode_inputs


@pytest.mark.parametrize("schedule, fn, args", [
    (AttentionSchedule(), causal_attention, qkv(8, 2, 300, 64)),
    (AttentionSchedule(), attention, qkv(4, 4, 128, 128)),
    (DecodeAttentionSchedule(), attention, decode_inputs(8, 2, 1, 3000, 64)),
], ids=["prefill-causal", "prefill", "decode"])
def test_each_best_setting_pinned_is_the_setting_the_schedule_takes(schedule, fn, args):
    compiled = lamina.compile(fn, args, target="sm_90")
    (kernel,) = [t.kernel for t in compiled.compilation.tiles if t.schedule == schedule.name]
    settings = schedule.best_settings(kernel, SM90, 4)
    assert len(settings) >= 2 and all(s.schedule == schedule.name for s in settings)
    assert settings[0].estimate_us == pytest.approx(schedule.estimate_cost(kernel, SM90))
    assert [s.estimate_us for s in settings[1:]] == sorted(s.estimate_us for s in settings[1:])
    tiles = [decided(schedule.schedule(kernel, SM90, dict(s.knobs))) for s in settings]
    assert tiles[0] == decided(schedule.schedule(kernel, SM90, {}))
    assert len(set(tiles)) == len(tiles)


def decided(tile):
    """What a tile decides, without the lines that say how it was chosen (its pins among them)."""
    return attrs.evolve(tile, knobs=tuple((k, v) for k, v in tile.knobs if k != "chosen"))

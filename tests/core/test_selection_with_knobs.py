"""A selection policy that offers ``select`` picks the schedule and may pin its knobs: the pipeline
schedules the kernel with them (where the configuration pins none of that schedule's), prints the
policy's note in the Tile IR, falls back to the schedule's own choice where it refuses them, and
refuses a schedule that was not a candidate."""

import pytest
import torch

from lamina.backends.reference.backend import ReferenceBackend
from lamina.core.config import Config
from lamina.core.errors import PluginError
from lamina.core.hookspecs import hookimpl
from lamina.core.pipeline import Pipeline
from lamina.core.plugins import PluginManager
from lamina.core.selection import Selection
from lamina.frontends.torch.capture import capture


class Pinning:
    """Takes the first candidate (with ``pins`` where it is the contraction, built first where ``build``),
    or ``other`` if given."""

    name = "pinning"

    def __init__(self, pins, other=None, build=False):
        self.pins, self.other, self.build, self.built = pins, other, build, []

    def choose(self, kernel, candidates, target):
        return candidates[0]

    def select(self, kernel, candidates, context):
        if self.other is not None:
            return Selection(self.other)
        schedule = candidates[0]
        if schedule.name != "contraction":
            return Selection(schedule)
        if self.build:
            tile, built = context.build(schedule, dict(self.pins))
            self.built.append((tile.schedule, built.name))
        return Selection(schedule, self.pins, note="pinned by the test's policy")


class Plugin:
    def __init__(self, policy):
        self.policy = policy

    @hookimpl
    def lamina_register_selection_policies(self, register):
        register(self.policy)


class _EntryPoint:
    def __init__(self, plugin):
        self.name, self.value, self.dist, self._plugin = "pinning", "Plugin()", None, plugin

    def load(self):
        return self._plugin


def compile_with(policy, **settings):
    manager = PluginManager(Config(selection="pinning", **settings), entry_points=lambda: [_EntryPoint(Plugin(policy))])
    pipeline = Pipeline(manager.config, manager)
    x, w = torch.randn(37, 96), torch.randn(96, 70)
    compilation = pipeline.compile(capture(torch.matmul, (x, w)).graph, pipeline.target())
    (result,) = ReferenceBackend().load(compilation, compilation.target)(x, w)
    torch.testing.assert_close(result, x @ w, rtol=1e-5, atol=1e-5)
    return compilation


def knobs(compilation) -> dict:
    (tile,) = compilation.tiles
    return dict(tile.knobs)


def test_the_policys_knobs_and_note_reach_the_tile_ir():
    policy = Pinning({"block_m": 16, "block_n": 32, "block_k": 16, "thread_m": 2, "thread_n": 2, "products": "fma"},
                     build=True)
    compilation = compile_with(policy)
    assert knobs(compilation)["selection"] == "pinned by the test's policy"
    assert knobs(compilation)["chosen"].startswith("block 16x32x16, thread 2x2")
    assert policy.built == [("contraction", compilation.tiles[0].kernel.name)]


def test_knobs_the_schedule_refuses_leave_it_its_own_choice_and_say_why():
    compilation = compile_with(Pinning({"block_m": 48, "thread_m": 5, "products": "fma"}))
    assert knobs(compilation)["selection"].startswith("pinned by the test's policy; refused by contraction (")
    assert "pinned: none" in knobs(compilation)["chosen"]


def test_a_schedule_that_is_not_a_candidate_is_refused():
    class Stranger:
        name = "stranger"

    with pytest.raises(PluginError, match="for kernel .*, chose .stranger., which is not one of the schedules"):
        compile_with(Pinning({}, other=Stranger()))

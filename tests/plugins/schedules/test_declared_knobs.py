"""Every knob a built-in schedule or fusion rule declares is one it reads: a knob renamed in the
schedule but not in its declaration would otherwise be pinned by the user and silently ignored."""

import functools

import pytest
import torch

import lamina
from lamina.core.config import Config
from lamina.core.errors import ScheduleError
from lamina.core.plugins import get_plugin_manager

PROGRAMS = {
    "pointwise": (lambda x: x + 1, (torch.randn(8, 128),)),
    "generic": (lambda x: x + 1, (torch.randn(8, 128),)),
    "row_reduction": (lambda x: torch.softmax(x, -1), (torch.randn(8, 128),)),
    "contraction": (lambda x, w: x @ w, (torch.randn(16, 64), torch.randn(64, 16))),
    "matmul_row_reduction": (lambda q, k: torch.softmax(q @ k.transpose(-1, -2), -1),
                         (torch.randn(64, 32), torch.randn(64, 32))),
    "unrolled_reduction": (lambda x: x.sum(0), (torch.randn(3, 128),)),
}
REGISTRY = get_plugin_manager(Config()).registry


def schedule_knobs():
    for name in PROGRAMS:
        for knob in REGISTRY.get("schedule", name).provider.knob_names:
            yield name, knob


@functools.cache
def compiled(schedule):
    function, inputs = PROGRAMS[schedule]
    return lamina.compile(function, inputs, target="sm_90", schedule=schedule).compilation


@pytest.mark.parametrize("schedule, knob", list(schedule_knobs()))
def test_a_schedule_reads_every_knob_it_declares(schedule, knob):
    compilation = compiled(schedule)
    (kernel,) = compilation.loop.kernels
    provider = REGISTRY.get("schedule", schedule).provider
    with pytest.raises(ScheduleError, match=knob):
        provider.schedule(kernel, compilation.target, {knob: "not a value"})


@pytest.mark.parametrize("knob", REGISTRY.get("fusion_rule", "split_contractions_across_blocks").provider.knob_names)
def test_split_k_reads_every_knob_it_declares(knob):
    with pytest.raises(ScheduleError, match=knob):
        lamina.compile(*PROGRAMS["contraction"], target="sm_90", knobs={f"contraction.{knob}": "not a value"})


@pytest.mark.parametrize("knob", REGISTRY.get("fusion_rule", "fuse_contraction_into_row_reduction").provider.knob_names)
def test_the_rows_fusion_reads_every_knob_it_declares(knob):
    """An unusable pin keeps the contraction apart from the softmax instead of failing the compile."""
    function, inputs = PROGRAMS["matmul_row_reduction"]
    assert len(compiled("matmul_row_reduction").kernels.kernels) == 1
    pinned = lamina.compile(function, inputs, target="sm_90", knobs={f"matmul_row_reduction.{knob}": "not a value"})
    assert pinned.kernel_count == 2

"""Knobs pinned per schedule in real compiles: each reaches only the schedule or fusion rule named."""

import warnings

import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.core.config import load_config
from lamina.core.errors import ConfigError, ConfigWarning
from lamina.core.pipeline import Pipeline


def matmul(x, w):
    return x @ w


def linear_bias(x, w, b):
    return F.linear(x, w, b)


MATMUL_INPUTS = (torch.randn(16, 64), torch.randn(64, 16))


def chosen(compiler):
    """What the contraction schedule chose for the matmul, and which knobs it was pinned."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        (tile,) = compiler.compile(matmul, MATMUL_INPUTS).compilation.tiles
    return dict(tile.knobs)["chosen"]


def test_a_knob_pinned_for_the_contraction_schedule_reaches_it():
    assert chosen(lamina.Compiler(knobs={"contraction": {"block_k": 8}})).endswith("pinned: block_k=8")
    assert chosen(lamina.Compiler(knobs={"contraction.block_k": 8})).endswith("pinned: block_k=8")


def test_the_environment_pins_a_knob_for_a_schedule(tmp_path):
    config = load_config(start=tmp_path, environ={"LAMINA_KNOB_CONTRACTION__BLOCK_K": "8"})
    assert chosen(lamina.Compiler(config=config)).endswith("pinned: block_k=8")


def test_a_knob_pinned_for_another_schedule_leaves_the_contraction_alone():
    with pytest.warns(ConfigWarning, match=r"matmul_row_reduction\.block_k = 8 was pinned, but no kernel"):
        assert chosen(lamina.Compiler(knobs={"matmul_row_reduction.block_k": 8})).endswith("pinned: none")


def test_threads_pinned_for_one_schedule_stay_out_of_the_others():
    compiler = lamina.Compiler(knobs={"pointwise.threads": 64})
    knobs = Pipeline(compiler.config, compiler.plugins).knobs()["schedule"]
    assert knobs["pointwise"] == {"threads": 64}
    assert knobs["row_reduction"] == knobs["generic"] == knobs["unrolled_reduction"] == {}


def test_a_knob_without_a_schedule_still_pins_every_schedule_that_takes_it_and_warns():
    compiler = lamina.Compiler(knobs={"threads": 64})
    with pytest.warns(FutureWarning) as warned:
        knobs = Pipeline(compiler.config, compiler.plugins).knobs()["schedule"]
    (message,) = [str(w.message) for w in warned]
    assert all(f"{name}.threads" in message for name in ("pointwise", "row_reduction", "generic", "unrolled_reduction"))
    for name in ("pointwise", "row_reduction", "generic", "unrolled_reduction"):
        assert knobs[name] == {"threads": 64}
    assert knobs["contraction"] == {}
    with pytest.warns(FutureWarning, match=r"contraction\.block_k"):
        (tile,) = lamina.compile(matmul, MATMUL_INPUTS, knobs={"block_k": 8}).compilation.tiles
    assert dict(tile.knobs)["chosen"].endswith("pinned: block_k=8")


def test_split_k_is_a_knob_of_the_contraction():
    torch.manual_seed(0)
    inputs = torch.randn(5, 96), torch.randn(24, 96), torch.randn(24)
    partial, combine = lamina.compile(linear_bias, inputs, knobs={"contraction": {"split_k": 3}}).compilation.tiles
    assert dict(partial.knobs)["split_k"].startswith("3 (partial sums, added up by the kernel that reads linear")


@pytest.mark.parametrize("knobs, message", [
    ({"contractoin.block_k": 8}, r"knob contractoin\.block_k: no schedule or fusion rule is named 'contractoin' "
                                 r"\(did you mean 'contraction\.block_k'\?\)"),
    ({"contraction.blok_k": 8}, r"knob contraction\.blok_k: contraction takes no knob 'blok_k' \(did you mean "
                                r"'block_k'\?\); its knobs: "
                                r"block_k, block_m, block_n, buffers, cluster_blocks, cluster_slices, consumer_warpgroups, copy_steps"),
    ({"inline_pointwise_producers.threads": 8}, r"inline_pointwise_producers takes no knob 'threads'"),
])
def test_a_knob_no_schedule_takes_is_an_error_at_compile_time(knobs, message):
    with pytest.raises(ConfigError, match=message):
        lamina.compile(matmul, MATMUL_INPUTS, knobs=knobs)

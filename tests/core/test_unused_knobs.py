"""A knob pinned for a schedule that no kernel of the program was scheduled by says so, once per compile."""

import warnings

import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.core.config import load_config
from lamina.core.errors import ConfigError, ConfigWarning


def softmax_then_scale(x):
    return torch.softmax(x, 1) * 2.0 + 1.0


def two_rows_and_a_pointwise(x):
    return torch.softmax(x, 1), torch.log_softmax(x * 3.0, 1), torch.tanh(x).t().contiguous()


def matmul(x, w):
    return x @ w


def linear_bias(x, w, b):
    return F.linear(x, w, b)


def unused_knob_warnings(program, inputs, **settings):
    """The ConfigWarnings of one compile about knobs that did nothing, and the compiled function."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = lamina.compile(program, inputs, **settings)
    messages = [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]
    return [m for m in messages if "the pin has no effect" in m], compiled


def test_a_contraction_knob_on_a_program_without_a_matmul_warns_once_naming_the_kernels_schedules():
    x = torch.randn(7, 33)
    found, compiled = unused_knob_warnings(two_rows_and_a_pointwise, (x,), knobs={"contraction": {"block_k": 32}})
    counts = {}
    for tile in compiled.compilation.tiles:
        counts[tile.schedule] = counts.get(tile.schedule, 0) + 1
    assert "contraction" not in counts
    listed = ", ".join(f"{n} x {name}" for name, n in counts.items())
    assert found == [f"knob contraction.block_k = 32 was pinned, but no kernel of this program was scheduled by "
                     f"contraction (its kernels: {listed}); the pin has no effect"]
    for got, expected in zip(compiled(x), two_rows_and_a_pointwise(x)):
        torch.testing.assert_close(got, expected)


def test_the_environment_pin_warns_too(tmp_path):
    config = load_config(start=tmp_path, environ={"LAMINA_KNOB_CONTRACTION__BLOCK_K": "32"})
    with pytest.warns(ConfigWarning, match=r"knob contraction\.block_k = 32 was pinned, but no kernel of this program "
                                           r"was scheduled by contraction \(its kernels: 1 x row_reduction\)"):
        lamina.Compiler(config=config).compile(softmax_then_scale, (torch.randn(4, 19),))


def test_a_fusion_rules_knob_under_a_schedules_name_counts_as_the_schedules():
    found, _ = unused_knob_warnings(softmax_then_scale, (torch.randn(4, 19),), knobs={"contraction.split_k": 3})
    assert [m.split(" was pinned")[0] for m in found] == ["knob contraction.split_k = 3"]
    torch.manual_seed(0)
    inputs = torch.randn(5, 96), torch.randn(24, 96), torch.randn(24)
    found, compiled = unused_knob_warnings(linear_bias, inputs, knobs={"contraction": {"split_k": 3}})
    assert found == []
    torch.testing.assert_close(compiled(*inputs), linear_bias(*inputs), rtol=1e-4, atol=1e-4)


def test_a_knob_that_a_kernels_schedule_received_does_not_warn():
    x, w = torch.randn(16, 40), torch.randn(40, 9)
    found, compiled = unused_knob_warnings(matmul, (x, w), knobs={"contraction.block_k": 8, "contraction.split_k": 1})
    assert found == []
    torch.testing.assert_close(compiled(x, w), x @ w, rtol=1e-4, atol=1e-4)


def test_only_the_pins_that_did_nothing_are_named():
    x, w = torch.randn(16, 40), torch.randn(40, 9)
    found, _ = unused_knob_warnings(matmul, (x, w), knobs={"contraction.block_k": 8, "pointwise.threads": 64,
                                                          "row_reduction.threads": 64})
    assert [m.split(" was pinned")[0] for m in found] == ["knob pointwise.threads = 64", "knob row_reduction.threads = 64"]
    assert all("(its kernels: 1 x contraction)" in m for m in found)


def test_a_knob_pinned_without_a_schedule_names_every_schedule_that_takes_it():
    x, w = torch.randn(16, 40), torch.randn(40, 9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        found, _ = unused_knob_warnings(matmul, (x, w), knobs={"threads": 64})
    (message,) = found
    assert message.startswith("knob threads = 64 was pinned, but no kernel of this program was scheduled by generic or ")
    assert "pointwise" in message and "row_reduction" in message


def test_under_strict_a_knob_that_did_nothing_is_an_error():
    with pytest.raises(ConfigError, match=r"(?s)knob contraction\.block_k = 32 was pinned, .*the pin has no effect"
                                          r".*strict is set"):
        lamina.compile(softmax_then_scale, (torch.randn(4, 19),), knobs={"contraction.block_k": 32}, strict=True)

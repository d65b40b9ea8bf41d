"""Capture a program, decompose it with the built-in ops, run it on the Tensor IR interpreter."""

from __future__ import annotations

from typing import Callable, Sequence

import attrs
import torch

from lamina.backends.reference.interpreter import interpret
from lamina.core.ir import tensor_ir
from lamina.core.stages.decompose import decompose
from lamina.frontends.torch import DEFAULT_KEEP, Captured, capture
from lamina.plugins.ops.plugin import DECOMPOSITIONS


@attrs.frozen
class Case:
    """A program of tensors to capture once and check against eager PyTorch on fresh inputs."""

    id: str
    program: Callable
    inputs: Callable[[], tuple]
    keep: tuple[str, ...] = DEFAULT_KEEP


def lower(program, inputs: Sequence[torch.Tensor], keep: Sequence[str] = DEFAULT_KEEP) -> tuple[Captured, tensor_ir.Program]:
    captured = capture(program, tuple(inputs), keep=keep)
    return captured, decompose(captured.graph, DECOMPOSITIONS)


def run(captured: Captured, program: tensor_ir.Program, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The interpreter's outputs, fed as a compiled function would be: user inputs, then module state."""
    feeds = {}
    for graph_input, value, position in zip(captured.graph.inputs, program.inputs, captured.user_input_positions):
        feeds[value.name] = inputs[position] if position is not None else captured.constants[graph_input.name].detach()
    return interpret(program, feeds)


def flatten(result) -> list[torch.Tensor]:
    if isinstance(result, (tuple, list)):
        return [t for item in result for t in flatten(item)]
    return [result]


TOLERANCE = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """The largest error relative to the largest magnitude of the expected tensor."""
    difference = (actual.double() - expected.double()).abs().max()
    return float(difference / expected.double().abs().max().clamp_min(1e-30))


def assert_matches(actual: torch.Tensor, expected: torch.Tensor, what: str = "") -> None:
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    if expected.numel() == 0:
        return
    if expected.dtype.is_floating_point:
        error = relative_error(actual, expected)
        assert error < TOLERANCE[expected.dtype], f"{what}: relative error {error:.3g}"
    else:
        assert torch.equal(actual, expected), f"{what}: values differ"

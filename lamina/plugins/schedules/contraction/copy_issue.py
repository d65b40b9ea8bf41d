"""When the contraction's main loop issues the next k-tile's copies into shared memory.

With two buffers, k-tile ``kt + 1`` is copied while k-tile ``kt`` is multiplied. The copies
may all be issued at once, after the barrier at the top of k-tile ``kt``, or spread over its
first steps of k, a few at each. At once, every warp of the SM issues a burst of copies at
about the same time; spread over the whole k-tile, the last copies are issued too late to
land before the next k-tile's wait.

On the H200, spread over the first half of the steps, the twelve fp32 linears of the
benchmark suite that were tried, whose blocks run 16 k-tiles or more, took 0.4 to 9 % less
time than with the copies issued at once; spread over every step, ten of them 19 to 31 % more,
over a quarter of the steps up to 6 % more; and the attention scores' products, of 4 and 8
k-tiles, 1.8 and 2.7 % more spread over half. With the rule in place, of the three
linears whose split-K slices differ in length, which the experiment could not edit, Qwen's
o and down projections at 128 rows ran as fast and 1.5 % faster, and TinyLlama's gate and
up projections 2 % slower, alternating with ``LAMINA_KNOB_COPY_STEPS=0``
(``experiments/contraction_tiling/``).
"""

from __future__ import annotations

import math

import attrs

from lamina.plugins.schedules.contraction.knobs import Choices
from lamina.plugins.schedules.contraction.recognise import Contraction

MIN_K_TILES = 16
"""Blocks that run fewer k-tiles than this issue each k-tile's copies at once."""
MIN_REGISTER_TILE = 64
"""Nor do blocks of register tiles smaller than 8 x 8, the only ones measured: each of their
steps is a quarter of the arithmetic or less, so a copy issued midway has less time to land."""


def steps_per_k_tile(choices: Choices) -> int:
    """The steps of k that each thread takes through a k-tile."""
    return choices.block_k // choices.splits


def default_copy_steps(c: Contraction, choices: Choices, asynchronous: bool) -> int:
    """Half the steps of a k-tile where ``cp.async`` copies into two buffers in a block of at
    least ``MIN_K_TILES`` k-tiles and ``MIN_REGISTER_TILE`` outputs per thread, multiplied
    with FMAs; else 0, all at once."""
    k_tiles = math.ceil(c.reduce_extent / choices.block_k)
    if choices.on_tensor_cores or not asynchronous or choices.buffers != 2 or k_tiles < MIN_K_TILES:
        return 0
    if choices.thread_m * choices.thread_n < MIN_REGISTER_TILE:
        return 0
    return max(1, steps_per_k_tile(choices) // 2)


def problem(choices: Choices, asynchronous: bool) -> str | None:
    """Why a pinned ``copy_steps`` cannot apply, or None."""
    steps = choices.copy_steps
    if not steps:
        return None
    if not asynchronous or choices.buffers != 2:
        return (f"copy_steps = {steps} needs cp.async copies into two buffers; this setting copies "
                f"{'with cp.async' if asynchronous else 'through registers'} into {choices.buffers}")
    if steps > steps_per_k_tile(choices):
        return f"copy_steps = {steps} exceeds the {steps_per_k_tile(choices)} steps of k of a k-tile"
    return None


def chosen(c: Contraction, choices: Choices, asynchronous: bool) -> Choices:
    """``choices`` with ``copy_steps`` chosen by rule, unless pinned."""
    if choices.copy_steps is not None:
        return choices
    return attrs.evolve(choices, copy_steps=default_copy_steps(c, choices, asynchronous))


def step_of_copy(i: int, copies: int, steps: int) -> int:
    """The step at which copy ``i`` of ``copies`` is issued, ``steps`` of them taking copies."""
    return i * steps // copies

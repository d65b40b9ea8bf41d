"""Registers the built-in decompositions, through the same hook as any third-party plugin."""

from __future__ import annotations

from lamina.core.hookspecs import hookimpl
from lamina.plugins.ops import (
    activations, attention, concat, convolution, division, elementwise, gather, iota, masks, matmul, norms, padding,
    pooling, reductions, scatter, structural, views,
)

DECOMPOSITIONS = {
    **elementwise.DECOMPOSITIONS,
    **activations.DECOMPOSITIONS,
    **matmul.DECOMPOSITIONS,
    **views.DECOMPOSITIONS,
    **reductions.DECOMPOSITIONS,
    **structural.DECOMPOSITIONS,
    **gather.DECOMPOSITIONS,
    **scatter.DECOMPOSITIONS,
    **concat.DECOMPOSITIONS,
    **iota.DECOMPOSITIONS,
    **masks.DECOMPOSITIONS,
    **attention.DECOMPOSITIONS,
    **norms.DECOMPOSITIONS,
    **padding.DECOMPOSITIONS,
    **convolution.DECOMPOSITIONS,
    **pooling.DECOMPOSITIONS,
    **division.DECOMPOSITIONS,
}
"""Every built-in decomposition, by the ATen op name that Torch IR prints."""


@hookimpl
def lamina_register_ops(register):
    for op, decomposition in DECOMPOSITIONS.items():
        register(op, decomposition)

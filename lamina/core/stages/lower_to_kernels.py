"""Tile IR to Kernel IR: each schedule lowers its kernels, the kernel passes follow; a kernel the
same as an earlier one but for its buffers' names (a model's next layer) is not lowered again.

A decoder's layers are the same program over other weights: their kernels differ in names only,
and so do their schedules' choices. Lowering one kernel takes a few milliseconds to half a second
(the attention kernel), a hundred layers' worth of them seconds, so each distinct kernel is
lowered once and the others take its Kernel IR with their own names for the buffers and for
the arrays named after them (``kernel_ir.rename_arrays``). Distinct means: the same schedule,
the same Loop IR with its buffers and accumulators named by position, and the same Tile IR with
those names.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from lamina.core.ir import kernel_ir, loop_ir, tile_ir
from lamina.core.target import Target


class KernelLowering:
    """Lowers tile kernels in order, each distinct one once."""

    def __init__(self, passes: Sequence[Any], target: Target):
        self.passes, self.target = passes, target
        self.lowered: dict[tuple[str, str, str], tuple[loop_ir.Kernel, kernel_ir.Kernel]] = {}
        self.repeats: dict[str, str] = {}
        """Each kernel that took an earlier one's Kernel IR, renamed, with that kernel's name."""

    def lower(self, schedule: Any, tile: tile_ir.TileKernel) -> kernel_ir.Kernel:
        key = (schedule.name, *_shape(tile))
        if key in self.lowered:
            first, kernel = self.lowered[key]
            renamed = kernel_ir.rename_arrays(kernel, _same_buffers(first, kernel, tile.kernel), name=tile.kernel.name)
            if _names_distinct(renamed):
                self.repeats[renamed.name] = kernel.name
                return renamed
        kernel = schedule.lower(tile, self.target)
        for kernel_pass in self.passes:
            kernel = kernel_pass.apply(kernel, self.target)
        kernel_ir.verify_kernel(kernel, self.target.max_threads_per_block, self.target.max_shared_bytes_optin)
        self.lowered.setdefault(key, (tile.kernel, kernel))
        return kernel


def _shape(tile: tile_ir.TileKernel) -> tuple[str, str]:
    """The tile's Loop IR and Tile IR with its names by position (``loop_ir.positional_names``)."""
    names = loop_ir.positional_names(tile.kernel)
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")\b")
    tile_text = pattern.sub(lambda m: names[m.group(1)], tile_ir.format_tile_kernel(tile))
    return loop_ir.format_kernel(loop_ir.with_positional_names(tile.kernel)), tile_text


def _same_buffers(first: loop_ir.Kernel, lowered: kernel_ir.Kernel, other: loop_ir.Kernel) -> dict[str, str]:
    """Each buffer of ``first`` to the buffer of ``other`` in its place, and each array or tensor
    map that ``lowered`` (``first``'s Kernel IR) named after them (``x_tile``, ``row_x``) to the
    same name after ``other``'s."""
    buffers = {a.name: b.name for a, b in zip(first.inputs + first.outputs, other.inputs + other.outputs)}
    if not buffers:
        return {}
    alternatives = "|".join(map(re.escape, sorted(buffers, key=len, reverse=True)))
    part = re.compile(rf"(?:(?<=_)|^)({alternatives})(?=_|$)")
    mapping = dict(buffers)
    for name in [a.name for a in lowered.arrays] + [m.name for m in lowered.tensor_maps]:
        mapping[name] = part.sub(lambda m: buffers[m.group(1)], name)
    return mapping


def _names_distinct(kernel: kernel_ir.Kernel) -> bool:
    """Whether the renamed kernel's parameters, arrays and tensor maps still have a name each (an
    array named after the first kernel's buffer might take the name of one of this kernel's)."""
    names = [p.name for p in kernel.params] + [a.name for a in kernel.arrays] + [m.name for m in kernel.tensor_maps]
    return len(names) == len(set(names))

"""The contraction schedule's decisions, written as Tile IR.

A block of 16 x 16 threads computes a BM x BN tile of the output, each thread a
contiguous (BM / 16) x (BN / 16) tile of it in registers. The reduction runs in
k-tiles of BK: each operand's BK-deep strip is copied into shared memory, stored
k-major so that the inner loop reads a row of it, padded against bank conflicts and
double-buffered so that the copy of the next k-tile overlaps the arithmetic on this one.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import attrs

from lamina.core.errors import ScheduleError
from lamina.core.ir import index, tile_ir
from lamina.core.target import Target
from lamina.plugins.schedules.contraction import copy_layout
from lamina.plugins.schedules.contraction.recognise import Contraction, Operand, analyse

SCHEDULE_NAME = "contraction"
THREADS_X = 16  # along N, the output's contiguous axis
THREADS_Y = 16  # along M
MAX_GRID_YZ = 65535
KNOB_DEFAULTS = {"block_m": 32, "block_n": 32, "block_k": 16, "padding": 1, "buffers": 2}
CP_ASYNC_BYTES = (4, 8, 16)


@attrs.frozen
class Choices:
    block_m: int
    block_n: int
    block_k: int
    padding: int
    buffers: int


def read_knobs(knobs: Mapping[str, Any], kernel_name: str, reduce_extent: int) -> Choices:
    """The block sizes, padding and buffer count: the pinned ones checked, the rest defaulted.

    Double buffering is the default only where there is a next k-tile to overlap.
    """
    where = f"kernel {kernel_name}, contraction schedule"
    values = {}
    for key, default in KNOB_DEFAULTS.items():
        value = knobs.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ScheduleError(f"{where}: knob {key} must be an integer, not {value!r}")
        values[key] = value
    for key, threads in (("block_m", THREADS_Y), ("block_n", THREADS_X)):
        if values[key] <= 0 or values[key] % threads:
            raise ScheduleError(
                f"{where}: knob {key} = {values[key]} must be a positive multiple of the {threads} threads "
                f"along that axis (16, 32, 48, 64 ...)"
            )
    if values["block_k"] <= 0:
        raise ScheduleError(f"{where}: knob block_k = {values['block_k']} must be positive")
    if values["padding"] < 0:
        raise ScheduleError(f"{where}: knob padding = {values['padding']} must be 0 or more elements")
    if values["buffers"] not in (1, 2):
        raise ScheduleError(f"{where}: knob buffers = {values['buffers']} must be 1 (no overlap) or 2 (double buffering)")
    if "buffers" not in knobs and reduce_extent <= values["block_k"]:
        values["buffers"] = 1
    return Choices(**values)


def grid_fits(c: Contraction, block_m: int = KNOB_DEFAULTS["block_m"]) -> bool:
    """Whether the blocks along M and the batch fit the grid's y and z limits."""
    batch = math.prod(c.extents[v] for v in c.batch)
    return batch <= MAX_GRID_YZ and math.ceil(c.extents[c.m] / block_m) <= MAX_GRID_YZ


def _contiguous_dim(c: Contraction, operand: Operand, dims: tuple[str, ...]) -> int | None:
    shape = c.kernel.buffer(operand.load.buffer).type.shape
    offset = index.linearize(operand.load.index, shape)
    for position, var in enumerate(dims):
        if index.coefficient(offset, var) == 1:
            return position
    return None


def _copy_kind(target: Target, itemsize: int) -> str:
    arch = int("".join(ch for ch in target.arch if ch.isdigit()) or 0)
    return "cp.async" if arch >= 80 and itemsize in CP_ASYNC_BYTES else "load_store"


def stage_for(c: Contraction, operand: Operand, choices: Choices, target: Target) -> tile_ir.SharedStage:
    r = c.reduce_var
    if operand.side == "m":
        dims, tile = (r, c.m), (choices.block_k, choices.block_m)
    elif operand.side == "n":
        dims, tile = (r, c.n), (choices.block_k, choices.block_n)
    else:
        dims, tile = (r,), (choices.block_k,)
    dtype = operand.load.dtype
    return tile_ir.SharedStage(
        buffer=operand.load.buffer,
        index=operand.text,
        dims=dims,
        tile=tile,
        dtype=dtype,
        padding=choices.padding if len(tile) == 2 else 0,
        buffers=choices.buffers,
        copy=_copy_kind(target, dtype.itemsize),
        copy_bytes=dtype.itemsize,
    )


def copy_order(c: Contraction, stage: tile_ir.SharedStage) -> copy_layout.CopyOrder:
    """How the threads share out the copy of ``stage`` (the same answer for scheduling and lowering)."""
    operand = c.operand(stage.index)
    contiguous = _contiguous_dim(c, operand, stage.dims)
    return copy_layout.choose_copy_order(stage.tile, stage.padding, stage.dtype.itemsize, contiguous)


def schedule_contraction(kernel, target: Target, knobs: Mapping[str, Any]) -> tile_ir.TileKernel:
    c = analyse(kernel)
    choices = read_knobs(knobs, kernel.name, c.reduce_extent)
    per_m, per_n = choices.block_m // THREADS_Y, choices.block_n // THREADS_X
    grid = [
        tile_ir.AxisBinding((c.n,), c.extents[c.n], "x", THREADS_X, per_n, "x"),
        tile_ir.AxisBinding((c.m,), c.extents[c.m], "y", THREADS_Y, per_m, "y"),
    ]
    if c.batch:
        batch = math.prod(c.extents[v] for v in c.batch)
        grid.append(tile_ir.AxisBinding(c.batch, batch, "z", 1, 1, "z"))
    stages = tuple(stage_for(c, o, choices, target) for o in c.operands)
    recorded = [("register_tile", f"{per_m}x{per_n}")]
    recorded += [(f"copy {s.index}", copy_layout.describe(copy_order(c, s), s.dims, s.tile)) for s in stages]
    tile = tile_ir.TileKernel(
        kernel=kernel,
        schedule=SCHEDULE_NAME,
        grid=grid,
        reduction=tile_ir.ReductionPlan((c.reduce_var,), c.reduce_extent, "serial", step=choices.block_k),
        stages=stages,
        knobs=recorded,
    )
    _check_limits(tile, c, target, choices)
    tile_ir.verify_tile_kernel(tile, target.max_threads_per_block, target.max_shared_bytes_optin)
    return tile


def _check_limits(tile: tile_ir.TileKernel, c: Contraction, target: Target, choices: Choices) -> None:
    where = f"kernel {tile.kernel.name}, contraction schedule"
    if tile.shared_bytes > target.max_shared_bytes_optin:
        remedy = "smaller blocks" + (" or buffers = 1" if choices.buffers > 1 else "")
        raise ScheduleError(
            f"{where}: block_m={choices.block_m}, block_n={choices.block_n}, block_k={choices.block_k} with "
            f"{choices.buffers} buffer(s) need {tile.shared_bytes} B of shared memory; {target.name} allows "
            f"{target.max_shared_bytes_optin} B per block. Pin {remedy}."
        )
    if not grid_fits(c, choices.block_m):
        shape = tile.grid_shape()
        raise ScheduleError(
            f"{where}: the grid ({shape['x']}, {shape['y']}, {shape['z']}) has more than {MAX_GRID_YZ} blocks "
            "along y or z; pin a larger block_m, or let the generic schedule run this kernel"
        )

"""The ``contraction_rows`` schedule's decisions, written as Tile IR.

A block holds ``block_m`` whole rows of the product: a warp's 32 lanes span a row, each
lane ``thread_n`` of its columns (runs of ``fragment_width`` adjacent ones, a warp's
worth apart) for ``thread_m`` rows. The product is computed as the contraction schedule
computes a ``block_m`` x (32 ``thread_n``) tile, operands staged in shared memory k-tile
by k-tile; then the row's reduce loops run over the registers, each lane's partial
result combined across the warp with shuffles, and the stores follow. A row longer than
a block holds (``MAX_ROW_LENGTH``) is spread over a cluster of blocks along it, 256
columns each: after each reduce loop the blocks exchange their parts of the row through
distributed shared memory. The contraction's cost model chooses among the settings
whose block tile spans the row (or its cluster's share of it).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from lamina.core.errors import ScheduleError
from lamina.core.ir import loop_ir, tile_ir
from lamina.core.target import Target
from lamina.plugins.schedules.contraction import copy_layout, cost
from lamina.plugins.schedules.contraction import tiling as contraction_tiling
from lamina.plugins.schedules.contraction.knobs import Choices, read_pinned
from lamina.plugins.schedules.contraction_rows.recognise import ContractionRows

SCHEDULE_NAME = "contraction_rows"
LANES = 32
MAX_ROW_LENGTH = 256
"""Rows up to this long are kept in the registers of one block, 8 columns per lane. On the
H200 one kernel beat the contraction and the softmax apart by 1.3-1.4x at 256 columns for
both models' attention scores; at 512 in one block it won for TinyLlama's (d = 64: 44.9
against 53.8 us) but lost for Qwen's (d = 128: 79.4 against 70.3 us), each at its fastest
block (``benchmarks/results/2026-11-29_h200_scores_rows_*.json``)."""
CLUSTER_COLUMNS = 256
"""Past ``MAX_ROW_LENGTH``, each block of a cluster holds this many columns of a row, 8 per lane."""
MAX_BLOCKS_PER_ROW = 4
"""Rows are spread over clusters of up to this many blocks. Against the contraction and the
softmax apart on the H200 (``…_scores_rows_cluster_shuffled.json``,
``…_scores_rows_cluster_two_kernels.json``): 512 columns in 2 blocks, 42.7 against 52.2 us
(TinyLlama) and 74.6 against 70.7 (Qwen); 1024 in 4, 173.6 against 192.9 and 255.1 against
264.6. 2048 in 8 took 721.7 against 715.6 and 1004.9 against 978.7 us
(``…_scores_s2048_cluster_shuffled.json``, two kernels in ``…_bench_float32_split_k_model.json``),
and no other block was faster (``…_scores_s2048_cluster_block_m*.json``): the softmax and the
cluster's exchanges add a third to the product's instructions, and every block waits at each
of three cluster barriers for the slowest of eight (``…_ncu_scores_s2048_*.txt``)."""
MAX_CLUSTER_ROW_LENGTH = MAX_BLOCKS_PER_ROW * CLUSTER_COLUMNS
"""Longer rows stay two kernels, the contraction and the row reduction."""


def columns_per_lane(length: int) -> int:
    """A lane's columns of a row of ``length``: whole runs of four past two, so that they are
    read 16 bytes at a time; 8 where a cluster holds the row."""
    if length > MAX_ROW_LENGTH:
        return CLUSTER_COLUMNS // LANES
    per_lane = math.ceil(length / LANES)
    return per_lane if per_lane <= 2 else 4 * math.ceil(per_lane / 4)


def cluster_blocks(length: int) -> int:
    """The blocks that hold each row of ``length`` together (1: a block holds whole rows)."""
    return math.ceil(length / CLUSTER_COLUMNS) if length > MAX_ROW_LENGTH else 1


def fixed_by_the_row(rows: ContractionRows) -> dict[str, int]:
    """The contraction knobs that a block holding whole rows fixes, and those this schedule
    keeps as they are: blocks in CUDA's order, each k-tile's copies issued at once, products
    on the CUDA cores."""
    per_lane = columns_per_lane(rows.contraction.extents[rows.contraction.n])
    return {"block_n": LANES * per_lane, "thread_n": per_lane, "splits": 1, "warp_columns": LANES, "grouped_rows": 1,
            "copy_steps": 0, "tensor_cores": 0}


def settings(rows: ContractionRows, target: Target) -> list[Choices]:
    """Every setting the cost model chooses among for ``rows`` when nothing is pinned."""
    return cost.candidates(rows.contraction, target, fixed_by_the_row(rows))


def _where(rows: ContractionRows) -> str:
    return f"kernel {rows.kernel.name}, contraction_rows schedule"


def choose(rows: ContractionRows, target: Target, knobs: Mapping[str, Any]) -> tuple[Choices, cost.Estimate, int, str]:
    """The cheapest setting whose block tile spans the row, its estimate, how many there were,
    and the pins it was chosen under. The contraction's knobs apply, but the row fixes
    ``block_n``, ``thread_n`` and ``splits``: other pinned values are a ``ScheduleError``
    (and the fusion rule then leaves the kernels apart)."""
    c = rows.contraction
    length = c.extents[c.n]
    if length > MAX_CLUSTER_ROW_LENGTH:
        raise ScheduleError(f"{_where(rows)}: rows of {length} are longer than the {MAX_CLUSTER_ROW_LENGTH} columns "
                            f"that a cluster of {MAX_BLOCKS_PER_ROW} blocks holds")
    fixed = fixed_by_the_row(rows)
    pinned = read_pinned(knobs, _where(rows))
    for key, value in fixed.items():
        if pinned.get(key, value) != value:
            raise ScheduleError(f"{_where(rows)}: knob {key} = {pinned[key]} cannot apply: a block holds whole rows of "
                                f"{length}, so {key} = {value}. Unpin {key}, or disable the plugin "
                                "lamina.builtin.schedules.contraction_rows to keep the product and its row "
                                "reduction apart")
    text = ", ".join(f"{k}={v}" for k, v in pinned.items()) or "none"
    choices, estimate, count = cost.choose(c, target, {**pinned, **fixed}, _where(rows))
    return choices, estimate, count, text


def tile(rows: ContractionRows, target: Target, knobs: Mapping[str, Any]) -> tile_ir.TileKernel:
    choices, estimate, count, pins = choose(rows, target, knobs)
    c = rows.contraction
    width = choices.fragment_width
    grid = [tile_ir.AxisBinding((c.m,), c.extents[c.m], "y", choices.threads_m, choices.thread_m, "y",
                                contiguous=False, group=width)]
    if c.batch:
        grid.append(tile_ir.AxisBinding(c.batch, math.prod(c.extents[v] for v in c.batch), "z", 1, 1, "z"))
    length = c.extents[c.n]
    blocks = cluster_blocks(length)
    reduction = tile_ir.ReductionPlan(rows.reduce_loops, length, "warp_shuffle", 1, LANES, blocks)
    stages = tuple(contraction_tiling.stage_for(c, o, choices, target) for o in c.operands)
    owned = f"runs of {width}, {LANES * width} apart" if width > 1 else f"{LANES} apart"
    reduced = ", ".join(f"{acc} {op}" for acc, (op, _) in rows.accumulators.items())
    across = f"a cluster of {blocks} blocks, {choices.block_n} columns each" if blocks > 1 else "a warp"
    combined = "by warp shuffles" + (", then the cluster's blocks' parts through distributed shared memory"
                                     if blocks > 1 else "")
    notes: list[tuple[str, object]] = [
        ("row", f"{length} columns across {across}: {LANES} lanes x {choices.thread_n} per lane ({owned})"),
        ("product", f"{c.acc} = sum over {c.reduce_var} ({c.reduce_extent}) in k-tiles of {choices.block_k}, "
                    "computed once per element and kept in registers"),
        ("element", f"{loop_ir.format_value(rows.element)}, computed once per element in place of {c.acc}"),
        ("row_reductions", f"{reduced}, each lane's part combined {combined}"),
        ("register_tile", f"{choices.thread_m}x{choices.thread_n}"),
        ("chosen", f"{choices.summary()}; cheapest of {count} settings spanning the row, pinned: {pins}"),
        ("estimate", estimate.text()),
    ]
    notes += [(f"copy {s.index}", copy_layout.describe(contraction_tiling.copy_order(c, s), s.dims, s.tile))
              for s in stages]
    tk = tile_ir.TileKernel(kernel=rows.kernel, schedule=SCHEDULE_NAME, grid=grid, reduction=reduction,
                            stages=stages, knobs=notes)
    tile_ir.verify_tile_kernel(tk, target.max_threads_per_block, target.max_shared_bytes_optin)
    return tk


def product_tile(rows: ContractionRows, tile: tile_ir.TileKernel) -> tile_ir.TileKernel:
    """``tile`` as the contraction schedule's Tile IR of the product: the row bound to a
    block's threads along x."""
    c = rows.contraction
    if tile.schedule != SCHEDULE_NAME:
        raise ScheduleError(f"the contraction_rows schedule cannot lower kernel {tile.kernel.name}: "
                            f"it was scheduled by {tile.schedule!r}")
    (m_binding, *batch) = tile.grid
    per_lane = columns_per_lane(c.extents[c.n])
    columns = tile_ir.AxisBinding((c.n,), c.extents[c.n], "x", LANES, per_lane, "x", contiguous=False,
                                  group=m_binding.group)
    block_k = tile.stages[0].tile[0]
    reduction = tile_ir.ReductionPlan((c.reduce_var,), c.reduce_extent, "serial", block_k, 1)
    return tile_ir.TileKernel(kernel=c.kernel, schedule=contraction_tiling.SCHEDULE_NAME,
                              grid=[columns, m_binding, *batch], reduction=reduction, stages=tile.stages)


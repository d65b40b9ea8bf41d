"""The ``matmul_row_reduction`` schedule's decisions, written as Tile IR.

A block holds ``block_m`` whole rows of the product: a warp's 32 lanes span a row, each
lane ``thread_n`` of its columns (runs of ``fragment_width`` adjacent ones, a warp's
worth apart) for ``thread_m`` rows. The product is computed as the contraction schedule
computes a ``block_m`` x (32 ``thread_n``) tile, operands staged in shared memory k-tile
by k-tile; then the row's reduce loops run over the registers, each lane's partial
result combined across the warp with shuffles, and the stores follow. A row longer than
a block holds (``MAX_ROW_LENGTH``) is spread over a cluster of blocks along it, 256
columns each: after each reduce loop the blocks exchange their parts of the row through
distributed shared memory.

Where the product can run on wgmma (``contraction.wgmma``: Hopper, float32), it does, and
the threads hold the wgmma's accumulators: four lanes of a warp span a row of each block,
and a block of 64 or 128 columns, or a cluster of them, spans the row. On the H200 that
took 11 and 28 % off TinyLlama's and Qwen's attention scores at S = 128 in the suite
(``experiments/attention_scores/``). Rows longer than
``MAX_FUSED_WGMMA_ROW_LENGTH``, up to ``MAX_LAST_BLOCK_ROW_LENGTH``, are combined by the last block instead of
clusters (``last_block``): each block stores its elements, and the last block of each band
of rows to finish reads them back and reduces them. The contraction's cost model chooses
among the settings whose block tile spans the row (or its cluster's or band's share of it),
each block's estimate stretched by the waits at its cluster's barriers.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import attrs

from lamina.core.errors import ScheduleError
from lamina.core.ir import expr as ex, kernel_ir, loop_ir, tile_ir
from lamina.core.target import Target
from lamina.plugins.schedules.contraction import (
    FMA,
    KNOBS,
    SCHEDULE_NAME as CONTRACTION,
    WGMMA,
    WGMMA_PRODUCTS,
    Choices,
    ContractionSettings,
    Estimate,
    candidates,
    cheapest_setting,
    column_run,
    copy_order,
    describe_copies,
    pins_text,
    read_pinned,
    settings_of,
    stage_for,
    warp_patch,
)
from lamina.plugins.schedules.contraction.mma_sync import COLUMN_RUN
from lamina.plugins.schedules.contraction.wgmma import BLOCK_MS, BLOCK_NS, choices_for, runs_on_wgmma, sixteen_bit
from lamina.plugins.schedules.matmul_row_reduction import last_block
from lamina.plugins.schedules.matmul_row_reduction.settings import RowSettings
from lamina.plugins.schedules.matmul_row_reduction.recognise import ContractionRows
from lamina.plugins.schedules.coordinate_conditions import decidable
from lamina.plugins.schedules.renamed_knobs import Renamed, with_new_spellings

SCHEDULE_NAME = "matmul_row_reduction"
FORMER_NAMES = ("contraction_rows",)
"""The name this schedule had before, still accepted for one release."""
LANES = 32
MAX_ROW_LENGTH = 256
"""Rows up to this long are kept in the registers of one block, 8 columns per lane. On the
H200 one kernel beat the contraction and the softmax apart by 1.3-1.4x at 256 columns for
both models' attention scores; at 512 in one block it won for TinyLlama's (d = 64) but lost
for Qwen's (d = 128), each at its fastest block (``experiments/attention_scores/``)."""
CLUSTER_COLUMNS = 256
"""Past ``MAX_ROW_LENGTH``, each block of a cluster holds this many columns of a row, 8 per lane."""
MAX_BLOCKS_PER_ROW = 4
"""Rows are spread over clusters of up to this many blocks. On the H200, against the
contraction and the softmax apart, 1024 columns in clusters of 4 were faster for both models'
scores; 2048 in clusters of 8 were slower in every block size: the softmax and the cluster's
exchanges add a third to the product's instructions, and every block waits at each of three
cluster barriers for the slowest of eight (``experiments/attention_scores/``)."""
MAX_CLUSTER_ROW_LENGTH = MAX_BLOCKS_PER_ROW * CLUSTER_COLUMNS
"""Longer rows stay two kernels, the contraction and the row reduction, unless their products
run on wgmma."""
MAX_WGMMA_ROW_LENGTH = kernel_ir.MAX_CLUSTER_BLOCKS * max(BLOCK_NS)
"""The longest rows that a cluster of wgmma blocks holds: where ``products = wgmma`` is pinned,
rows up to this long are one kernel."""
MAX_FUSED_WGMMA_ROW_LENGTH = kernel_ir.MAX_PORTABLE_CLUSTER_BLOCKS * max(BLOCK_NS)
"""Where the products can run on wgmma and ``products`` is not pinned, a cluster has at most
``MAX_PORTABLE_CLUSTER_BLOCKS`` blocks, and longer rows are combined by the last block
(``combined_by_last_block``). On the H200 clusters of 16 lost to the two kernels by 5 to 20 % on
both models' scores at S = 2048; clusters of 8 at S = 1024 won by 6 to 9 % in blocks of 64 x 128.
Clusters of 16 of those blocks hold 85 % of the blocks the H200's SMs hold at once, clusters of 8
91 % (``experiments/attention_scores/``)."""
ROW_COMBINE_KNOB = "row_combine"
ROW_COMBINES = CLUSTER, LAST_BLOCK = ("cluster", "last_block")
"""How the blocks along a row combine their parts of it: ``last_block``, each stores its part and
the last of them to finish reduces the rows (``last_block``); ``cluster``, a cluster of blocks
holds each row and combines it through distributed shared memory."""
RENAMED = (Renamed("last_block", ROW_COMBINE_KNOB, lambda v: dict(enumerate(ROW_COMBINES)).get(v, v),
                   "0, 1 are cluster, last_block"),)
MAX_LAST_BLOCK_ROW_LENGTH = 2048
"""The longest rows the last block of a band reduces: a warp holds one in registers, 64 per lane."""
MAX_FUSED_ROW_LENGTH = max(MAX_WGMMA_ROW_LENGTH, MAX_LAST_BLOCK_ROW_LENGTH)
"""The longest rows that the fusion rule offers the schedule."""
CLUSTER_WAIT = 0.1
"""How much longer a block's work takes for each further block of its cluster: every block waits
at the row's cluster barriers (three for a softmax) for the slowest of them. Fitted to the
scores' rows on wgmma on the H200 (``experiments/attention_scores/``), where the
contraction's estimates fell 0.5 to 2.2 times short of the measured times, more the more
blocks a cluster had: with it the model ranks first the fastest of the four blocks for both
models' scores at S = 128, 512 and 1024, and Qwen's at 256."""


def columns_per_lane(length: int) -> int:
    """A lane's columns of a row of ``length``: whole runs of four past two, so that they are
    read 16 bytes at a time; 8 where a cluster holds the row."""
    if length > MAX_ROW_LENGTH:
        return CLUSTER_COLUMNS // LANES
    per_lane = math.ceil(length / LANES)
    return per_lane if per_lane <= 2 else 4 * math.ceil(per_lane / 4)


def fixed_by_the_row(rows: ContractionRows) -> dict[str, int]:
    """The contraction knobs that a block holding whole rows fixes, and those this schedule
    keeps as they are: blocks in CUDA's order, each k-tile's copies issued at once, products
    on the CUDA cores."""
    per_lane = columns_per_lane(rows.contraction.extents[rows.contraction.n])
    return {"block_n": LANES * per_lane, "thread_n": per_lane, "splits": 1, "warp_columns": LANES, "grouped_rows": 1,
            "copy_steps": 0, "products": FMA}


def fixed_on_wgmma(block_n: int) -> dict[str, int]:
    """The contraction knobs that a wgmma block of ``block_n`` columns of the row fixes: the
    wgmma's own, and blocks in CUDA's order, as a cluster needs them."""
    wgmma = choices_for(BLOCK_MS[0], block_n, 2)
    return {"block_n": block_n, "thread_n": wgmma.thread_n, "splits": 1, "fragment_width": wgmma.fragment_width,
            "warp_columns": wgmma.warp_columns, "grouped_rows": 1, "copy_steps": 0,
            "products": WGMMA}


def _wgmma_layouts(length: int, pinned: Mapping[str, int]) -> list[dict[str, int]]:
    """One wgmma block width for each cluster of blocks that can span a row of ``length``: of up
    to ``MAX_PORTABLE_CLUSTER_BLOCKS`` blocks, or ``MAX_CLUSTER_BLOCKS`` where ``products``
    is pinned."""
    most = kernel_ir.MAX_CLUSTER_BLOCKS if "products" in pinned else kernel_ir.MAX_PORTABLE_CLUSTER_BLOCKS
    return [fixed_on_wgmma(n) for n in BLOCK_NS if math.ceil(length / n) <= most]


def on_wgmma(rows: ContractionRows, target: Target, pinned: Mapping[str, int]) -> bool:
    """Whether the products run on wgmma: where ``products = wgmma`` is pinned, or where
    ``products`` is not pinned and a wgmma block can run the product with the knobs pinned
    (on Hopper, float32 operands contiguous along the reduction: this schedule's wgmma blocks
    split them into tf32 pieces, and 16-bit operands are not among them)."""
    if sixteen_bit(rows.contraction):
        return False
    if "products" in pinned:
        return pinned["products"] == WGMMA
    return any(candidates(rows.contraction, target, {**fixed_on_wgmma(n), **pinned})
               for n in BLOCK_NS)


def layouts(rows: ContractionRows, pinned: Mapping[str, int], wgmma: bool) -> list[dict[str, int]]:
    """The ways a block may hold its part of each row, as the knobs each fixes: on wgmma
    (``on_wgmma``) one per width of block whose cluster spans the row; on the CUDA cores one way."""
    if wgmma:
        return _wgmma_layouts(rows.contraction.extents[rows.contraction.n], pinned)
    return [fixed_by_the_row(rows)]


def too_long(rows: ContractionRows, pinned: Mapping[str, int], wgmma: bool) -> str | None:
    """Why no cluster of blocks, on wgmma or not (``on_wgmma``), holds a row of ``rows`` under
    ``pinned``, or None."""
    length = rows.contraction.extents[rows.contraction.n]
    if not wgmma:
        if length <= MAX_CLUSTER_ROW_LENGTH:
            return None
        return (f"rows of {length} are longer than the {MAX_CLUSTER_ROW_LENGTH} columns that a cluster of "
                f"{MAX_BLOCKS_PER_ROW} blocks holds on the CUDA cores")
    if "products" in pinned:
        if length <= MAX_WGMMA_ROW_LENGTH:
            return None
        return (f"rows of {length} are longer than the {MAX_WGMMA_ROW_LENGTH} columns that a cluster of "
                f"{kernel_ir.MAX_CLUSTER_BLOCKS} wgmma blocks holds")
    if length <= MAX_FUSED_WGMMA_ROW_LENGTH:
        return None
    return (f"rows of {length} are longer than the {MAX_FUSED_WGMMA_ROW_LENGTH} columns that a cluster of "
            f"{kernel_ir.MAX_PORTABLE_CLUSTER_BLOCKS} wgmma blocks holds, past which the product and the row "
            f"reduction run faster apart; pin products = wgmma to hold rows of up to {MAX_WGMMA_ROW_LENGTH} in "
            f"clusters of up to {kernel_ir.MAX_CLUSTER_BLOCKS}")


def last_block_layouts() -> list[dict[str, int]]:
    """The ways a block may hold its part of a band's rows: any wgmma block width, as many
    blocks along the row as it takes."""
    return [fixed_on_wgmma(n) for n in BLOCK_NS]


def last_block_problem(rows: ContractionRows, wgmma: bool) -> str | None:
    """Why the last block of each band cannot reduce the rows of ``rows``, or None. The blocks
    store the row's elements where the kernel's one store puts its result, and the band's last
    block reads them back, 16 bytes at a time, and overwrites them."""
    c = rows.contraction
    length = c.extents[c.n]
    if not wgmma:
        return "the last block along a block's rows reduces them only where the products run on wgmma"
    if length > MAX_LAST_BLOCK_ROW_LENGTH:
        return (f"rows of {length} are longer than the {MAX_LAST_BLOCK_ROW_LENGTH} columns that the last block of a "
                "band holds, a row to a warp")
    if length % 4:
        return f"rows of {length} columns are not read back 16 bytes at a time: the length must be a multiple of 4"
    if len(c.epilogue) != 1:
        return f"the kernel stores {len(c.epilogue)} values per element; the elements are kept in one output"
    (store,) = c.epilogue
    buffer = rows.kernel.buffer(store.buffer)
    variables = [i.name for i in store.index if isinstance(i, ex.Var)]
    singles = all(isinstance(i, ex.Var) or (i == ex.const(0) and extent == 1)
                  for i, extent in zip(store.index, buffer.type.shape))
    coordinates = {*c.batch, c.m, c.n}
    needed = {v for v in coordinates if c.extents[v] > 1}
    distinct = len(set(variables)) == len(variables) and needed <= set(variables) <= coordinates
    if not (singles and distinct and store.index[-1] == ex.Var(c.n)):
        return (f"the kernel stores {store.buffer}[{', '.join(map(loop_ir.format_value, store.index))}], not one "
                "element per row and column of the product with the row's columns last")
    if buffer.type.dtype != rows.element.dtype:
        return (f"the kernel stores {buffer.type.dtype} {store.buffer}, which cannot hold the row's "
                f"{rows.element.dtype} elements until the last block reads them")
    return None


def read_row_combine(knobs: Mapping[str, Any], where: str) -> str | None:
    """The pinned value of ``ROW_COMBINE_KNOB``, checked, or None (its old spelling ``last_block``
    read with a warning)."""
    knobs = with_new_spellings(knobs, RENAMED)
    if ROW_COMBINE_KNOB not in knobs:
        return None
    value = knobs[ROW_COMBINE_KNOB]
    if value not in ROW_COMBINES:
        raise ScheduleError(f"{where}: knob {ROW_COMBINE_KNOB} = {value!r} must be cluster (clusters of blocks hold "
                            "the rows) or last_block (the last block along each block's rows to finish reduces "
                            "them)")
    return value


def combined_by_last_block(rows: ContractionRows, pinned: Mapping[str, int], wgmma: bool, row_combine: str | None) -> bool:
    """Whether the band's last block reduces the rows (``last_block``): where pinned, or, unpinned,
    where no cluster may hold a row (``too_long``), the band can (``last_block_problem``), and the band
    skips whatever elements a mask fixes (``last_block.skipped_elements``). Apart, the product and
    the softmax skip the masked elements' stores and reads; where the last block combined rows
    that skipped only the product, the suite's causal scores at S = 2048 took 8 to 12 % longer on
    the H200 than apart; skipping the stores and the reads too, 3 to 7 % less
    (``experiments/attention_scores/``)."""
    if row_combine is not None:
        return row_combine == LAST_BLOCK
    return (too_long(rows, pinned, wgmma) is not None and last_block_problem(rows, wgmma) is None
            and (last_block.unneeded_where(rows) is None or last_block.skipped_elements(rows) is not None))


def settings(rows: ContractionRows, target: Target, pinned: Mapping[str, int] | None = None) -> list[Choices]:
    """Every setting the cost model chooses among for ``rows`` under ``pinned`` (none by default)."""
    pinned = dict(pinned or {})
    wgmma = on_wgmma(rows, target, pinned)
    found = layouts(rows, pinned, wgmma)
    if last_block_problem(rows, wgmma) is None:
        found += [fixed for fixed in last_block_layouts() if fixed not in found]
    return [s for fixed in found for s in candidates(rows.contraction, target, {**pinned, **fixed})]


def _where(rows: ContractionRows) -> str:
    return f"kernel {rows.kernel.name}, matmul_row_reduction schedule"


def choose(rows: ContractionRows, target: Target,
           knobs: Mapping[str, Any]) -> tuple[Choices, Estimate, int, str, bool]:
    """The cheapest setting whose block tile spans the row, or a band of it (``combined_by_last_block``), its
    estimate, how many there were, the pins it was chosen under, and whether the band's last
    block reduces the rows. The contraction's knobs apply, but the row fixes ``block_n``,
    ``thread_n`` and ``splits`` (``layouts``): other pinned values, and rows too long for a
    cluster (``too_long``) or a band (``last_block_problem``), are a ``ScheduleError`` (and the fusion
    rule then leaves the kernels apart)."""
    c = rows.contraction
    length = c.extents[c.n]
    pinned = read_pinned(knobs, _where(rows))
    wgmma = on_wgmma(rows, target, pinned)
    row_combine = read_row_combine(knobs, _where(rows))
    by_last_block = combined_by_last_block(rows, pinned, wgmma, row_combine)
    reason = last_block_problem(rows, wgmma) if by_last_block else too_long(rows, pinned, wgmma)
    if reason is not None:
        raise ScheduleError(f"{_where(rows)}: {reason}")
    candidates = last_block_layouts() if by_last_block else layouts(rows, pinned, wgmma)
    fitting = [fixed for fixed in candidates if all(pinned.get(key, value) == value for key, value in fixed.items())]
    if not fitting:
        key = next(k for k, v in candidates[0].items() if pinned.get(k, v) != v)
        allowed = " or ".join(str(v) for v in sorted({fixed[key] for fixed in candidates}))
        knob = KNOBS.get(key, key)
        raise ScheduleError(f"{_where(rows)}: knob {knob} = {pinned[key]} cannot apply: a block holds whole rows of "
                            f"{length}, so {knob} = {allowed}. Unpin {knob}, or disable the plugin "
                            "lamina.builtin.schedules.matmul_row_reduction to keep the product and its row "
                            "reduction apart")
    pins = {**pinned, **({ROW_COMBINE_KNOB: row_combine} if row_combine is not None else {})}
    text = pins_text(pins) or "none"
    found = []
    for fixed in fitting:
        choices, estimate, count = cheapest_setting(c, target, {**pinned, **fixed}, _where(rows))
        cluster = 1 if by_last_block else math.ceil(length / choices.block_n)
        found.append((choices, with_cluster_waits(estimate, cluster), count))
    choices, estimate, _ = min(found, key=lambda f: f[1].total_us)
    if by_last_block:
        estimate = attrs.evolve(estimate, total_us=estimate.total_us + last_block_read_back_us(rows, target))
    return choices, estimate, sum(count for _, _, count in found), text, by_last_block


def last_block_read_back_us(rows: ContractionRows, target: Target) -> float:
    """The last blocks' pass, after the product: every element of the product read back
    (even those that a mask lets them skip, ``last_block.skipped_elements``) and its result
    stored, at the memory's bandwidth. On the H200 the pass took 0.7 to 0.8 of this (the scores
    at S = 2048), as it overlaps the products of other blocks' rows and reads some elements from
    L2."""
    c = rows.contraction
    elements = math.prod(c.extents[v] for v in (*c.batch, c.m, c.n))
    return 2 * elements * rows.element.dtype.itemsize / target.memory_bytes_per_us


def with_cluster_waits(estimate: Estimate, blocks: int) -> Estimate:
    """``estimate`` of a block in a cluster of ``blocks``, its compute and memory stretched by
    the waits at the cluster's barriers (``CLUSTER_WAIT``)."""
    stretch = 1 + CLUSTER_WAIT * (blocks - 1)
    return attrs.evolve(estimate, total_us=estimate.launch_us + (estimate.total_us - estimate.launch_us) * stretch,
                        compute_us=estimate.compute_us * stretch, memory_us=estimate.memory_us * stretch)


def tile(rows: ContractionRows, target: Target, knobs: Mapping[str, Any]) -> tile_ir.TileKernel:
    choices, estimate, count, pins, by_last_block = choose(rows, target, knobs)
    c = rows.contraction
    wgmma = runs_on_wgmma(choices)
    grid = [tile_ir.AxisBinding((c.m,), c.extents[c.m], "y", choices.threads_m, choices.thread_m, "y",
                                contiguous=False, group=choices.fragment_width)]
    if c.batch:
        grid.append(tile_ir.AxisBinding(c.batch, math.prod(c.extents[v] for v in c.batch), "z", 1, 1, "z"))
    length = c.extents[c.n]
    blocks = math.ceil(length / choices.block_n)
    lanes = choices.threads_n
    if by_last_block:
        reduction = tile_ir.ReductionPlan(rows.reduce_loops, length, "last_block", 1, lanes)
    else:
        reduction = tile_ir.ReductionPlan(rows.reduce_loops, length, "warp_shuffle", 1, lanes, blocks)
    stages = tuple(stage_for(c, o, choices, target) for o in c.operands)
    run = column_run(choices)
    owned = f"runs of {run}, {lanes * run} apart" if run > 1 else f"{lanes} apart"
    reduced = ", ".join(f"{acc} {op}" for acc, (op, _) in rows.accumulators.items())
    across = "a warp" if lanes == LANES else f"{lanes} lanes of a warp"
    if blocks > 1:
        across = f"{'' if by_last_block else 'a cluster of '}{blocks} blocks, {choices.block_n} columns each"
    combined = "by warp shuffles" + (", then the cluster's blocks' parts through distributed shared memory"
                                     if blocks > 1 and not by_last_block else "")
    on = " on wgmma, the threads holding its accumulators" if wgmma else ""
    notes: list[tuple[str, object]] = [
        ("row", f"{length} columns across {across}: {lanes} lanes x {choices.thread_n} per lane ({owned})"),
        ("product", f"{c.acc} = sum over {c.reduce_var} ({c.reduce_extent}) in k-tiles of {choices.block_k}{on}, "
                    "computed once per element and kept in registers"),
        ("element", f"{loop_ir.format_value(rows.element)}, computed once per element in place of {c.acc}"),
    ]
    if by_last_block:
        runs = math.ceil(length / (LANES * last_block.WIDTH))
        notes += [
            ("last_block", f"each block stores its elements in {c.epilogue[0].buffer} and counts itself done for "
                           f"its {choices.block_m} rows; the last of the {blocks} blocks along those rows to finish "
                           f"reads them back through L2, a warp per row, {LANES} lanes x {runs * last_block.WIDTH} "
                           f"per lane (runs of {last_block.WIDTH}, {LANES * last_block.WIDTH} apart)"),
            ("row_reductions", f"{reduced}, each warp's row combined by warp shuffles; the stores evict-first, "
                               "over the elements they read"),
        ]
        condition = last_block.unneeded_where(rows)
        if condition is not None and decidable(condition):
            notes.append(("unneeded_product", f"a block where {loop_ir.format_value(condition)} at every element "
                                              "runs no k-tile: its elements do not use the sum"))
        skipped = last_block.skipped_elements(rows)
        if skipped is not None:
            condition, value = skipped
            text = loop_ir.format_value(condition)
            notes.append(("skipped_elements", f"a block where {text} at every element stores nothing; the last "
                                              f"block reads back no run of {last_block.WIDTH} where {text} at "
                                              f"all of them, and holds {loop_ir.format_value(value)} there instead"))
    else:
        notes.append(("row_reductions", f"{reduced}, each lane's part combined {combined}"))
    notes += [
        ("register_tile", f"{choices.thread_m}x{choices.thread_n}"),
        ("chosen", f"{choices.summary()}; cheapest of {count} settings spanning the row, pinned: {pins}"),
        ("estimate", estimate.text() + (f"; compute and memory {1 + CLUSTER_WAIT * (blocks - 1):.1f}x for the waits "
                                        f"at the cluster's barriers" if blocks > 1 and not by_last_block else "")
                     + (f"; then {last_block_read_back_us(rows, target):.1f} us for the last blocks to read the "
                        "elements back and store the results" if by_last_block else "")),
    ]
    notes += [(f"copy {s.index}", describe_copies(copy_order(c, s), s.dims, s.tile))
              for s in stages]
    tk = tile_ir.TileKernel(kernel=rows.kernel, schedule=SCHEDULE_NAME, grid=grid, reduction=reduction,
                            stages=stages, knobs=notes,
                            settings=RowSettings(warp_patch(choices),
                                                 products=WGMMA_PRODUCTS if wgmma else None,
                                                 blocks_combined_by_last_block=blocks if by_last_block else 1))
    tile_ir.verify_tile_kernel(tk, target.max_threads_per_block, target.max_shared_bytes_optin)
    tile_ir.verify_tile_kernel(product_tile(rows, tk), target.max_threads_per_block, target.max_shared_bytes_optin)
    return tk


def product_tile(rows: ContractionRows, tile: tile_ir.TileKernel) -> tile_ir.TileKernel:
    """``tile`` as the contraction schedule's Tile IR of the product: the block's share of
    the row bound to its threads along x."""
    c = rows.contraction
    if tile.schedule != SCHEDULE_NAME:
        raise ScheduleError(f"the matmul_row_reduction schedule cannot lower kernel {tile.kernel.name}: "
                            f"it was scheduled by {tile.schedule!r}")
    (m_binding, *batch) = tile.grid
    n_stage = next(s for s in tile.stages if c.n in s.dims)
    block_n = dict(zip(n_stage.dims, n_stage.tile))[c.n]
    lanes = tile.reduction.splits
    settings = settings_of(tile)
    run = COLUMN_RUN if settings.products else m_binding.group
    columns = tile_ir.AxisBinding((c.n,), c.extents[c.n], "x", lanes, block_n // lanes, "x", contiguous=False,
                                  group=run)
    block_k = dict(zip(n_stage.dims, n_stage.tile))[c.reduce_var]
    reduction = tile_ir.ReductionPlan((c.reduce_var,), c.reduce_extent, "serial", block_k, 1)
    return tile_ir.TileKernel(kernel=c.kernel, schedule=CONTRACTION,
                              grid=[columns, m_binding, *batch], reduction=reduction, stages=tile.stages,
                              settings=ContractionSettings(settings.warp_patch, products=settings.products))

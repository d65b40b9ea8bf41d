"""The float32 attention schedule's knobs, its cost model and its Tile IR.

A block takes ``block_queries`` consecutive queries of one group (16 a warp) and walks their
keys ``keys_per_tile`` at a time, cp.async copying each tile of keys and values into a ring of
``stages`` buffers while the warps work on the one before; causal attention walks only the
tiles that some query of the block sees. Each product runs on the tensor cores as three tf32
products (``writer`` says how), so the arithmetic is most of the cost: a tile's work on one SM
is ``TILE_NS_PER_WORK`` per query, key and feature (the scores' depth and the values'
features), at the SM's pace once ``SATURATING_WARPS`` warps share it and proportionally slower
with fewer (the mma's latency is not hidden); the blocks spread over the SMs and the longest
wave bounds the kernel. The constants are estimates from the contraction's ``mma.sync``
products (46 TFLOP/s of three-product tf32 on the H200), not yet fitted to this kernel
(``experiments/float32_attention/fit.py`` fits them to the times its script measures).
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Mapping

import attrs

from lamina.core.errors import ScheduleError
from lamina.core.ir import expr as ex, kernel_ir, loop_ir, tile_ir
from lamina.core.target import Target
from lamina.plugins.schedules.attention.decode.tiling import SHARED_BYTES_PER_SM
from lamina.plugins.schedules.attention.float32.recognise import PromptAttention
from lamina.plugins.schedules.pinned_knobs import pinned_values

SCHEDULE_NAME = "attention_float32"
KNOB_NAMES = ("block_queries", "keys_per_tile", "stages")
MIN_ARCH = 80
"""tf32 ``mma.sync`` and cp.async are Ampere's (sm_80) and later."""
WARP_ROWS = 16
"""The queries of one warp: the rows of an ``mma.sync`` m16n8k8."""
BLOCK_QUERIES = (64, 128)
KEYS_PER_TILE = (32, 64)
STAGES = (2, 3)
MAX_ACCUMULATORS = 96
"""Float32 registers a thread holds for the scores, the probabilities' small pieces and the
output (a warp's 16 rows: half a register per key or feature each): 128 features in tiles of 64
keys (128 of them) spilled under NVRTC, 96 fit without."""
COPY_BYTES = 16
LAUNCH_US = 3.0
TILE_NS_PER_WORK = 6.5e-3
"""A tile's products and softmax on one SM, in nanoseconds per query, key and feature (the
scores' depth plus the values' features), the SM's tensor cores kept busy."""
SATURATING_WARPS = 16
"""Warps on an SM at which the tile's pace is reached; fewer leave the mma's latency exposed."""


def padded(width: int) -> int:
    """A staged row of ``width`` floats padded to 4 or 28 words past a multiple of 32, so that
    a warp's fragment reads (8 rows by 4 columns of the queries and keys; 4 rows two apart by 8
    columns of the values) fall in 32 different banks, each row starting on 16 bytes."""
    row = width
    while row % 32 not in (4, 28):
        row += 4
    return row


@attrs.frozen
class Float32AttentionChoice:
    block_queries: int
    keys_per_tile: int
    stages: int

    @property
    def threads(self) -> int:
        return self.block_queries // WARP_ROWS * kernel_ir.WARP_SIZE

    @property
    def warps(self) -> int:
        return self.block_queries // WARP_ROWS


def shared_bytes(p: PromptAttention, choice: Float32AttentionChoice) -> int:
    queries = 2 * choice.block_queries * padded(p.depth)
    staged = choice.stages * choice.keys_per_tile * (padded(p.depth) + padded(p.features))
    return (queries + staged) * 4


def accumulators(p: PromptAttention, choice: Float32AttentionChoice) -> int:
    """Float32 registers a thread holds across a tile: scores, the probabilities' small pieces, output."""
    return choice.keys_per_tile + p.features // 2


def key_tiles(p: PromptAttention, choice: Float32AttentionChoice, first_query: int) -> int:
    """The key tiles that the block of queries from ``first_query`` walks."""
    tiles = math.ceil(p.keys_extent / choice.keys_per_tile)
    last = p.last_visible_key(ex.const(min(first_query + choice.block_queries, p.queries_extent) - 1))
    if last is not None and isinstance(last, ex.Const):
        tiles = max(1, min(tiles, math.ceil((last.value + 1) / choice.keys_per_tile)))
    return tiles


def estimate_us(p: PromptAttention, choice: Float32AttentionChoice, target: Target) -> float:
    query_blocks = math.ceil(p.queries_extent / choice.block_queries)
    blocks = p.groups_extent * query_blocks
    tiles = sum(key_tiles(p, choice, b * choice.block_queries) for b in range(query_blocks)) / query_blocks
    resident = max(1, min(target.max_threads_per_sm // choice.threads,
                          SHARED_BYTES_PER_SM // shared_bytes(p, choice)))
    together = min(resident, math.ceil(blocks / target.sm_count))
    waves = math.ceil(blocks / (target.sm_count * resident))
    work = choice.block_queries * choice.keys_per_tile * (p.depth + p.features) * TILE_NS_PER_WORK * 1e-3
    pace = min(1.0, together * choice.warps / SATURATING_WARPS)
    walking = waves * tiles * work * together / pace
    read = (p.groups_extent * p.keys_extent * (p.depth + p.features)
            + p.groups_extent * p.queries_extent * (p.depth + p.features)) * 4
    return LAUNCH_US + max(walking, read / target.memory_bytes_per_us)


def _pinned(knobs: Mapping[str, Any], where: str) -> dict[str, Any]:
    return pinned_values(knobs, {"block_queries": BLOCK_QUERIES, "keys_per_tile": KEYS_PER_TILE, "stages": STAGES},
                         where)


def ranked(p: PromptAttention, target: Target, knobs: Mapping[str, Any]) -> list[tuple[float, Float32AttentionChoice]]:
    """Every setting the pins allow with its estimate, cheapest first (fewer queries per block,
    then larger tiles, among equals); a ``ScheduleError`` where none fits."""
    where = f"kernel {p.kernel.name}, {SCHEDULE_NAME} schedule"
    if target.compute_capability < MIN_ARCH:
        raise ScheduleError(f"{where}: tf32 mma.sync and cp.async need sm_80 or later, not {target.arch}")
    pinned = _pinned(knobs, where)

    def options(name: str, legal: tuple) -> list:
        return [pinned[name]] if name in pinned else list(legal)

    found = []
    for queries, keys, stages in itertools.product(options("block_queries", BLOCK_QUERIES),
                                                   options("keys_per_tile", KEYS_PER_TILE), options("stages", STAGES)):
        choice = Float32AttentionChoice(queries, keys, stages)
        if shared_bytes(p, choice) > target.max_shared_bytes_optin or accumulators(p, choice) > MAX_ACCUMULATORS:
            continue
        found.append((round(estimate_us(p, choice, target), 3), queries, -keys, stages, choice))
    if not found:
        raise ScheduleError(f"{where}: no setting fits in {target.max_shared_bytes_optin} B of shared memory and "
                            f"{MAX_ACCUMULATORS} accumulators a thread")
    return [(estimate, choice) for estimate, *_, choice in sorted(found, key=lambda f: f[:4])]


def choose(p: PromptAttention, target: Target, knobs: Mapping[str, Any]) -> tuple[Float32AttentionChoice, float, int]:
    """The cheapest setting the pins allow, its estimate in microseconds, and how many were weighed."""
    found = ranked(p, target, knobs)
    return found[0][1], found[0][0], len(found)


@attrs.frozen
class Float32AttentionSettings(tile_ir.ScheduleSettings):
    """What the bindings do not say: the block's warps, and the queries' pieces in shared memory."""

    block_queries: int
    depth: int

    @property
    def threads(self) -> int:
        return self.block_queries // WARP_ROWS * kernel_ir.WARP_SIZE

    def extra_threads(self, tk: tile_ir.TileKernel) -> int:
        """The bindings give one thread a block; its warps share the queries."""
        return self.threads - 1

    def shared_bytes(self, tk: tile_ir.TileKernel) -> int:
        return 2 * self.block_queries * padded(self.depth) * 4

    def reduction_text(self, tk: tile_ir.TileKernel) -> str:
        return ", online softmax across the tiles"

    def lines(self, tk: tile_ir.TileKernel) -> list[str]:
        warps = self.block_queries // WARP_ROWS
        return [f"  rows: {self.block_queries} queries per block, {WARP_ROWS} a warp ({warps} warps); the queries "
                f"split once into tf32 pieces (big and small) in shared memory, {self.depth} + pad "
                f"{padded(self.depth) - self.depth} floats a row",
                "  products on tensor cores: mma.sync m16n8k8, each float32 product as three tf32 products (small "
                "by big, big by small, big by big) summed from zero and added in float32; the scores stay in "
                "registers as the probabilities' A fragments"]


def tile(p: PromptAttention, target: Target, knobs: Mapping[str, Any]) -> tile_ir.TileKernel:
    choice, estimate, count = choose(p, target, knobs)
    pins = ", ".join(f"{k} = {v}" for k, v in sorted(_pinned(knobs, "").items())) or "none"
    a = p.loops
    grid = [tile_ir.AxisBinding(tuple(loop.var for loop in p.queries), p.queries_extent, "x", 1,
                                choice.block_queries, "x")]
    if p.groups:
        grid.append(tile_ir.AxisBinding(tuple(loop.var for loop in p.groups), p.groups_extent, "y", 1, 1, "x"))
    keys = choice.keys_per_tile
    reduction = tile_ir.ReductionPlan((a.key_var,), p.keys_extent, "serial", keys)
    stages = [
        tile_ir.SharedStage(p.keys.buffer, loop_ir.format_value(p.keys), (a.key_var, a.dot_loop.var),
                            (keys, p.depth), p.keys.dtype, padded(p.depth) - p.depth, choice.stages, "cp.async",
                            COPY_BYTES),
        tile_ir.SharedStage(p.values.buffer, loop_ir.format_value(p.values), (a.values_loop.var, a.feature_loop.var),
                            (keys, p.features), p.values.dtype, padded(p.features) - p.features, choice.stages,
                            "cp.async", COPY_BYTES),
    ]
    causal = p.last_visible_key(ex.Var(p.queries[0].var)) is not None
    skipped = ", the key tiles after its last query's skipped (causal)" if causal else ""
    notes = [("chosen", f"{choice.block_queries} queries per block, key tiles of {keys}, {choice.stages} stages"
                        f"{skipped}; cheapest of {count} settings, pinned: {pins}"),
             ("estimate", f"{estimate:.1f} us")]
    tk = tile_ir.TileKernel(kernel=p.kernel, schedule=SCHEDULE_NAME, grid=grid, reduction=reduction, stages=stages,
                            knobs=notes,
                            settings=Float32AttentionSettings(choice.block_queries, p.depth))
    tile_ir.verify_tile_kernel(tk, target.max_threads_per_block, target.max_shared_bytes_optin)
    return tk

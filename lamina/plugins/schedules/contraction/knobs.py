"""The knobs of the contraction schedule, and the checks on the values a user pins."""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from lamina.core.errors import ScheduleError
from lamina.plugins.schedules.renamed_knobs import Renamed, with_new_spellings

KNOB_NAMES = (
    "block_m", "block_n", "block_k", "thread_m", "thread_n", "in_block_k_splits", "buffers", "padding",
    "fragment_width", "warp_columns", "grouped_rows", "copy_steps", "products",
)
PIPELINE_KNOB_NAMES = ("stages", "consumer_warpgroups", "tile_scheduler", "cluster_blocks", "cluster_slices")
"""Knobs of ``products = wgmma_tma`` alone (the contraction schedule's, not the schedules built on
its block)."""
PRODUCTS = FMA, MMA_SYNC, WGMMA, WGMMA_TMA = ("fma", "mma_sync", "wgmma", "wgmma_tma")
"""Where the products run: FMAs on the CUDA cores, warp-wide ``mma.sync`` on the tensor cores, or
Hopper's warpgroup ``wgmma``, on the tensor cores each float32 operand as two tf32 pieces; or
(``wgmma_tma``) bf16 and fp16 operands copied by Hopper's TMA into a ring of stages and multiplied
as they are by ``wgmma`` (``wgmma_tma``)."""
MIN_STAGES, MAX_STAGES = 2, 12
"""The k-tiles the Hopper GEMM's ring may hold at once: as deep as cuBLAS's rings for 128-row products
(12); the shared memory bounds each block shape's (``setting.problem``)."""
CONSUMER_WARPGROUPS = (1, 2)
TILE_SCHEDULERS = GRID, PERSISTENT = ("grid", "persistent")
"""How the Hopper GEMM's blocks meet the output tiles: a block per tile (``grid``), or as many
blocks as the SMs hold, each walking its share of the tiles, its producer copying the next tile's
k-tiles while its consumers store the last (``persistent``)."""
CLUSTER_BLOCKS = (1, 2)
"""Blocks of the Hopper GEMM that run as one cluster: alone, or two blocks of adjacent block rows
sharing their k-tiles of B, each block's producer copying half of them for both (the TMA's
multicast), so that B crosses from L2 to the SMs once per pair."""
CLUSTER_SLICES = (1, 2, 3, 4)
"""Slices of the Hopper GEMM's reduction, one per block of a cluster: each block sums its slice's
k-tiles, and the cluster's first block adds the others' sums from their shared memory and runs the
epilogue (``wgmma_tma.cluster_slices``), so that a product of few output tiles fills the SMs without
a second kernel to add the slices."""
FIELDS = {"in_block_k_splits": "splits"}
"""The ``Choices`` field of each knob whose name differs from it."""
KNOBS = {field: knob for knob, field in FIELDS.items()}
RENAMED = (
    Renamed("splits", "in_block_k_splits"),
    Renamed("tensor_cores", "products", lambda v: dict(enumerate(PRODUCTS)).get(v, v),
            "0, 1, 2 are fma, mma_sync, wgmma"),
)
FORMER_KNOB_NAMES = tuple(r.old for r in RENAMED)
MAX_BUFFERS = 3
FRAGMENT_WIDTHS = (4, 1)
"""The widths a thread's register-tile rows and columns may be grouped by, the preferred first."""
WARP_COLUMNS = (1, 2, 4, 8, 16, 32)
"""How many of a warp's 32 threads may lie along a row of the block's threads."""


@attrs.frozen
class Choices:
    """One setting of the knobs.

    A block computes a ``block_m`` x ``block_n`` output tile with ``block_m / thread_m`` x
    ``block_n / thread_n`` threads, each holding a ``thread_m`` x ``thread_n`` register tile;
    ``splits`` groups of such threads share each ``block_k``-deep k-tile and add up their
    partial sums at the end. ``buffers`` k-tiles are in shared memory at once; ``padding``
    (None: chosen per operand) pads the rows of the staged tiles. A thread owns its rows and
    columns in runs of ``fragment_width`` adjacent ones, each read from shared memory in one
    access (1: single rows and columns, ``threads_m`` and ``threads_n`` apart).

    ``warp_columns`` and ``grouped_rows`` arrange threads and blocks without changing what
    a block computes (``arrangement``; None: not yet arranged, CUDA's order): each warp
    is a patch of ``32 / warp_columns`` x ``warp_columns`` of the block's threads, and blocks
    run down ``grouped_rows`` rows of the grid before the next column.

    ``copy_steps`` is when the next k-tile's copies are issued (``copy_issue``; None: not
    yet chosen): over the first ``copy_steps`` steps of k of each k-tile, a few at each, or
    all at once after the k-tile's barrier (0).

    ``products`` (``PRODUCTS``) multiplies on the tensor cores, each float32 operand split into
    two tf32 pieces, with warp-wide ``mma.sync`` (``mma_sync``) or with Hopper's warpgroup
    ``wgmma`` (``wgmma``), instead of with FMAs on the CUDA cores (``fma``). ``splits`` is
    the knob ``in_block_k_splits``. With ``products = wgmma_tma`` (16-bit operands), ``stages``
    k-tiles are in the TMA's ring at once, ``consumer_warpgroups`` warpgroups run the wgmma and
    ``tile_scheduler`` (``TILE_SCHEDULERS``) gives the blocks their tiles and ``cluster_blocks``
    (``CLUSTER_BLOCKS``) pairs blocks that share B, and ``cluster_slices`` (``CLUSTER_SLICES``) cuts
    the reduction into slices that a cluster's blocks sum (``wgmma_tma``); the other settings leave
    the five None.
    """

    block_m: int
    block_n: int
    block_k: int
    thread_m: int
    thread_n: int
    splits: int = 1
    buffers: int = 2
    padding: int | None = None
    fragment_width: int = 1
    warp_columns: int | None = None
    grouped_rows: int | None = None
    copy_steps: int | None = None
    products: str = FMA
    stages: int | None = None
    consumer_warpgroups: int | None = None
    tile_scheduler: str | None = None
    cluster_blocks: int | None = None
    cluster_slices: int | None = None

    @property
    def threads_m(self) -> int:
        return self.block_m // self.thread_m

    @property
    def threads_n(self) -> int:
        return self.block_n // self.thread_n

    @property
    def threads(self) -> int:
        return self.threads_m * self.threads_n * self.splits

    def summary(self) -> str:
        if self.products == WGMMA_TMA:
            groups = self.consumer_warpgroups
            walk = ", persistent blocks" if self.tile_scheduler == PERSISTENT else ""
            walk += f", clusters of {self.cluster_blocks} sharing B" if (self.cluster_blocks or 1) > 1 else ""
            walk += (f", the reduction in {self.cluster_slices} slices summed in a cluster"
                     if (self.cluster_slices or 1) > 1 else "")
            return (f"block {self.block_m}x{self.block_n}x{self.block_k}, {self.stages} stages, {groups} consumer "
                    f"warpgroup{'s' if groups > 1 else ''}{walk}, on tensor cores through TMA and wgmma")
        text = (
            f"block {self.block_m}x{self.block_n}x{self.block_k}, thread {self.thread_m}x{self.thread_n}, "
            f"in-block k-splits {self.splits}, buffers {self.buffers}, fragment width {self.fragment_width}"
        )
        text += f", padding {self.padding}" if self.padding is not None else ""
        text += f", copies over {self.copy_steps} steps" if self.copy_steps else ""
        return text + {FMA: "", MMA_SYNC: ", on tensor cores", WGMMA: ", on tensor cores through wgmma"}[self.products]

    @property
    def on_tensor_cores(self) -> bool:
        return self.products != FMA


def read_pinned(knobs: Mapping[str, Any], where: str) -> dict[str, int]:
    """The knobs of this schedule that ``knobs`` pins, checked one by one, keyed by their
    ``Choices`` field (old spellings read as the new ones, with a warning)."""
    knobs = with_new_spellings(knobs, RENAMED)
    pinned = {}
    for key in KNOB_NAMES + PIPELINE_KNOB_NAMES:
        if key not in knobs:
            continue
        value = knobs[key]
        if key == "products":
            if value not in PRODUCTS:
                raise ScheduleError(
                    f"{where}: knob products = {value!r} must be fma (FMAs on the CUDA cores), mma_sync (mma on the "
                    "tensor cores, each float32 operand as two tf32 pieces), wgmma (Hopper's wgmma on the same "
                    "pieces) or wgmma_tma (bf16 or fp16 operands copied by the TMA, on Hopper's wgmma)"
                )
            pinned["products"] = value
            continue
        if key == "tile_scheduler":
            if value not in TILE_SCHEDULERS:
                raise ScheduleError(
                    f"{where}: knob tile_scheduler = {value!r} must be grid (a block per output tile) or persistent "
                    "(as many blocks as the SMs hold, each walking its share of the tiles)"
                )
            pinned["tile_scheduler"] = value
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise ScheduleError(f"{where}: knob {key} must be an integer, not {value!r}")
        if key == "padding" and value < 0:
            raise ScheduleError(f"{where}: knob padding = {value} must be 0 or more elements")
        if key == "buffers" and not 1 <= value <= MAX_BUFFERS:
            raise ScheduleError(
                f"{where}: knob buffers = {value} must be 1 (no overlap), 2 (double buffering) or 3 (two k-tiles in flight)"
            )
        if key == "stages" and not MIN_STAGES <= value <= MAX_STAGES:
            raise ScheduleError(
                f"{where}: knob stages = {value} must be {MIN_STAGES} to {MAX_STAGES}: the k-tiles in the TMA's ring at once"
            )
        if key == "consumer_warpgroups" and value not in CONSUMER_WARPGROUPS:
            raise ScheduleError(
                f"{where}: knob consumer_warpgroups = {value} must be 1 or 2: the warpgroups that run the wgmma"
            )
        if key == "cluster_blocks" and value not in CLUSTER_BLOCKS:
            raise ScheduleError(
                f"{where}: knob cluster_blocks = {value} must be 1 (blocks alone) or 2 (pairs of blocks of adjacent "
                "rows sharing the copies of B)"
            )
        if key == "cluster_slices" and value not in CLUSTER_SLICES:
            raise ScheduleError(
                f"{where}: knob cluster_slices = {value} must be one of {', '.join(map(str, CLUSTER_SLICES))}: the "
                "slices of the reduction that the blocks of a cluster sum (1: the whole reduction in each block)"
            )
        if key == "warp_columns" and value not in WARP_COLUMNS:
            raise ScheduleError(
                f"{where}: knob warp_columns = {value} must be one of {', '.join(map(str, WARP_COLUMNS))}: "
                "the threads of a warp along a row of the block's threads"
            )
        if key == "fragment_width" and value not in FRAGMENT_WIDTHS:
            raise ScheduleError(
                f"{where}: knob fragment_width = {value} must be 1 (rows and columns one by one) or 4 "
                "(in runs of four, read 16 bytes at a time)"
            )
        if key == "copy_steps" and value < 0:
            raise ScheduleError(
                f"{where}: knob copy_steps = {value} must be 0 (each k-tile's copies at once) or the steps of k "
                "over which they are spread"
            )
        if key not in ("padding", "buffers", "copy_steps") and value <= 0:
            raise ScheduleError(f"{where}: knob {key} = {value} must be positive")
        pinned[FIELDS.get(key, key)] = value
    return pinned


def pins_text(pinned: Mapping[str, Any], separator: str = "=") -> str:
    """The pinned knobs as a user spells them."""
    return ", ".join(f"{KNOBS.get(k, k)}{separator}{v}" for k, v in pinned.items())

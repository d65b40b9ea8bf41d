"""The decode schedule's knobs, its cost model and its Tile IR.

A block takes the ``group_rows`` rows that read the same keys and values and a range of
``keys_per_block`` keys (flash-decoding), which it walks ``keys_per_tile`` at a time, copying
up to ``stages - 1`` tiles ahead while it works on one: the grid is the row groups along x by the key
ranges along z, so that one sequence's single query fills the SMs. ``products`` says where the
dot products and the values' sums run: on the CUDA cores, a key per thread, or on the tensor
cores (``tensor_cores``), the group's rows padded to the 16 of an ``mma.sync`` m16n8k16, for
16-bit keys and values whose program rounds the probabilities to their type and whose query
factor is a 16-bit value: there the tensor cores' products are exact, as the CUDA cores' are.
Reading the cache is most of the cost: each block copies its keys and values once, and with more
than one range each writes its rows' maximum, sum and unscaled output (float32) for the last of
them to combine, which reads every range's back. The estimate is those bytes at the H200's
bandwidth, scaled up where fewer blocks than SMs share it, or the walk over the tiles where that
takes longer (each tile's arithmetic on the CUDA or the tensor cores, shared by the blocks on an
SM, or its copy's trip to memory, which the stages ahead hide a share of), a fixed cost per wave
of blocks and the last block's combining, per range. The constants are fitted to the H200
(``experiments/decode_attention/``), but the tensor cores', a tile's latency and the combining,
which an H100's sweep over key ranges refitted (``experiments/decode_on_tensor_cores/``).
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Mapping

import attrs

from lamina.core.errors import ScheduleError
from lamina.core.ir import dtypes, expr as ex, kernel_ir, loop_ir, sizes, tile_ir
from lamina.core.target import Target
from lamina.plugins.schedules.attention.decode.recognise import COPY_BYTES, DecodeAttention
from lamina.plugins.schedules.pinned_knobs import pinned_values

SCHEDULE_NAME = "attention_decode"
KNOB_NAMES = ("keys_per_block", "keys_per_tile", "stages", "products")
KEYS_PER_TILE = (64, 128)
PRODUCTS = ("cuda_cores", "tensor_cores")
MMA_ROWS = 16
"""The rows of an ``mma.sync`` m16n8k16: the group's rows padded with zeros."""
STAGES = (2, 3, 4)
KEYS_PER_BLOCK = tuple(64 << k for k in range(10))
THREADS = 128
MIN_ARCH = 80
"""cp.async copies global memory into shared memory from Ampere (sm_80) on."""
LAUNCH_US = 2.0
WAVE_US = 1.5
"""A wave of blocks: the first copy's trip to memory."""
TILE_LATENCY_US = 0.8
"""A tile's copy from memory to the block, which the stages before it hide a share of."""
TILE_NS_PER_WORK = 1.3e-2
"""A tile's arithmetic on one SM, in nanoseconds per key, row and feature (the queries' and the
values'): the dot products and the values' sums on the CUDA cores."""
TENSOR_CORE_TILE_NS_PER_WORK = 1.0e-3
"""The same on the tensor cores, per key, padded row and feature: small beside a tile's copy, as
measured (a tile there takes about its copies' latency, under half of its time on the CUDA
cores), so that the tensor cores are taken wherever they apply (``experiments/decode_on_tensor_cores/``)."""
COMBINE_US = 0.01
"""The last block's combining, per range and per pair of outputs that one of its threads combines."""
SHARED_BYTES_PER_SM = 228 * 1024


@attrs.frozen
class DecodeChoice:
    keys_per_block: int
    keys_per_tile: int
    stages: int
    products: str = "cuda_cores"

    def splits(self, d: DecodeAttention) -> int:
        """The key ranges: a number, taken at ``weighed_keys`` where the keys are counted at run time."""
        return math.ceil(weighed_keys(d) / self.keys_per_block)

    @property
    def tiles(self) -> int:
        return self.keys_per_block // self.keys_per_tile

    def tiles_per_range(self, d: DecodeAttention) -> sizes.Size:
        """A range's tiles: ``keys_per_block`` of them; where the keys are counted at run time (a
        growing cache), as many as it takes for the ranges to cover them."""
        if sizes.is_symbolic(d.keys_extent):
            return sizes.blocks(d.keys_extent, self.splits(d) * self.keys_per_tile)
        return self.tiles


GROWING_CACHE_KEYS = 2048
"""The fewest keys at which a cache whose length is known only at run time is weighed: its hint is
the length at the first step that compiled it, the shortest it will be, and the key ranges chosen
there are the ranges of every later, longer step; a range left empty by a shorter cache costs its
block a few loads and stores."""


def weighed_keys(d: DecodeAttention) -> int:
    """The keys the cost model weighs: the number, or for a cache counted at run time its hint, at
    least ``GROWING_CACHE_KEYS``."""
    if sizes.is_symbolic(d.keys_extent):
        return max(sizes.hint(d.keys_extent), GROWING_CACHE_KEYS)
    return d.keys_extent


def padded(d: DecodeAttention, width: int) -> int:
    """A staged row's elements: ``width`` and one more 16-byte copy, so that threads reading
    a row each hit other banks."""
    return width + d.vector


def lanes_per_row(d: DecodeAttention) -> int:
    """Lanes that share a staged row of values, a 16-byte run each: a power of two, so that
    the lanes of other rows combine their sums by shuffles."""
    return 1 << math.ceil(math.log2(d.features // d.vector))


def tensor_cores_refused(d: DecodeAttention) -> str | None:
    """Why the products cannot run on the tensor cores exactly as the program computes them, or None."""
    query = d.query
    if d.dtype not in (dtypes.bfloat16, dtypes.float16):
        return f"its keys and values are {d.dtype}, not bf16 or f16"
    if not (isinstance(query, ex.Op) and query.op == "cast" and query.args[0].dtype == d.dtype):
        return f"its query factor is not a {d.dtype} value"
    if d.loops.rounding != d.dtype:
        return f"it does not round its probabilities to {d.dtype}"
    if d.depth % 16:
        return f"its {d.depth} features per key are no multiple of the 16 of an mma's k"
    return None


def score_row_elements(keys_per_tile: int, products: str) -> int:
    """A row of the shared scores: on the tensor cores, 8 more, which spreads a warp's reads of the
    probabilities (two adjacent ones a lane, from 8 rows) over the banks: 2-way conflicts, where rows
    of a multiple of 32 floats gave 8-way."""
    return keys_per_tile + (8 if products == "tensor_cores" else 0)


def shared_bytes(d: DecodeAttention, choice: DecodeChoice) -> int:
    keys = choice.keys_per_tile
    staged = choice.stages * keys * (padded(d, d.depth) + padded(d, d.features)) * d.dtype.itemsize
    if choice.products == "tensor_cores":
        rows = MMA_ROWS
        queries = rows * padded(d, d.depth) * d.dtype.itemsize
        floats = rows * (score_row_elements(keys, choice.products) + 1) \
            + d.group_rows * (4 + choice.splits(d) + d.features)
    else:
        queries = d.group_rows * d.depth * 4
        floats = d.group_rows * (keys + 4 + choice.splits(d)) \
            + (THREADS // kernel_ir.WARP_SIZE) * d.group_rows * d.features
    return staged + queries + floats * 4 + 16


def estimate_us(d: DecodeAttention, choice: DecodeChoice, target: Target) -> float:
    splits = choice.splits(d)
    blocks = d.row_groups * splits
    read = d.row_groups * weighed_keys(d) * (d.depth + d.features) * d.dtype.itemsize
    combined = d.rows_extent * splits * (d.features + 2) * 4 * 2 if splits > 1 else 0
    resident = max(1, min(target.max_threads_per_sm // THREADS, SHARED_BYTES_PER_SM // shared_bytes(d, choice)))
    waves = math.ceil(blocks / (target.sm_count * resident))
    together = min(resident, math.ceil(blocks / target.sm_count))
    if choice.products == "tensor_cores":
        work = choice.keys_per_tile * MMA_ROWS * (d.depth + d.features) * TENSOR_CORE_TILE_NS_PER_WORK
    else:
        work = choice.keys_per_tile * d.group_rows * (d.depth + d.features) * TILE_NS_PER_WORK
    per_tile = max(work * 1e-3 * together, TILE_LATENCY_US / (choice.stages - 1))
    walking = waves * choice.tiles * per_tile
    memory = (read + combined) / target.memory_bytes_per_us * max(1.0, target.sm_count / blocks)
    return LAUNCH_US + WAVE_US * waves + max(memory, walking) + combining_us(d, splits)


def combining_us(d: DecodeAttention, splits: int) -> float:
    """The last block's combining of the ranges' sums."""
    return COMBINE_US * splits * math.ceil(d.group_rows * d.features / 2 / THREADS) if splits > 1 else 0.0


def _pinned(knobs: Mapping[str, Any], where: str) -> dict[str, Any]:
    return pinned_values(knobs, {"keys_per_block": KEYS_PER_BLOCK, "keys_per_tile": KEYS_PER_TILE, "stages": STAGES,
                                 "products": PRODUCTS}, where)


def choose(d: DecodeAttention, target: Target, knobs: Mapping[str, Any]) -> tuple[DecodeChoice, float, int]:
    """The cheapest setting the pins allow, its estimate in microseconds, and how many were weighed."""
    found = ranked(d, target, knobs)
    return found[0][1], found[0][0], len(found)


def ranked(d: DecodeAttention, target: Target, knobs: Mapping[str, Any]) -> list[tuple[float, DecodeChoice]]:
    """Every setting the pins allow with its estimate, cheapest first (larger tiles first among
    equals); a ``ScheduleError`` where none fits."""
    where = f"kernel {d.kernel.name}, attention_decode schedule"
    if target.compute_capability < MIN_ARCH:
        raise ScheduleError(f"{where}: the schedule copies with cp.async, which needs sm_80 or later")
    pinned = _pinned(knobs, where)
    refused = tensor_cores_refused(d)
    if pinned.get("products") == "tensor_cores" and refused is not None:
        raise ScheduleError(f"{where}: knob products = 'tensor_cores', but {refused}; pin 'cuda_cores' or leave it "
                            "to the cost model")
    found = []
    longest = max(64, 1 << math.ceil(math.log2(weighed_keys(d))))

    def options(name: str, legal: tuple) -> list:
        return [pinned[name]] if name in pinned else list(legal)

    products = options("products", PRODUCTS if refused is None else ("cuda_cores",))
    for tile, keys, stages, product in itertools.product(options("keys_per_tile", KEYS_PER_TILE),
                                                         options("keys_per_block", KEYS_PER_BLOCK),
                                                         options("stages", STAGES), products):
        if keys % tile or keys > max(longest, tile) or (stages > 2 and stages > keys // tile):
            continue
        choice = DecodeChoice(keys, tile, stages, product)
        if shared_bytes(d, choice) <= target.max_shared_bytes_optin:
            found.append((estimate_us(d, choice, target), -tile, keys, stages, PRODUCTS.index(product), choice))
    if not found:
        raise ScheduleError(f"{where}: no setting fits in {target.max_shared_bytes_optin} B of shared memory")
    return [(estimate, choice) for estimate, *_, choice in sorted(found, key=lambda f: f[:5])]


@attrs.frozen
class DecodeSettings(tile_ir.ScheduleSettings):
    """What the bindings do not say: the block's threads and the combining of the key ranges."""

    splits: int
    group_rows: int
    tiles_per_range: sizes.Size
    products: str = "cuda_cores"

    def extra_threads(self, tk: tile_ir.TileKernel) -> int:
        """The block's threads share its keys: the bindings give one."""
        return THREADS - 1

    def shared_bytes(self, tk: tile_ir.TileKernel) -> int:
        keys, features = tk.reduction.step, tk.stages[1].tile[1]
        if self.products == "tensor_cores":
            depth = tk.stages[0].tile[1]
            return MMA_ROWS * (depth + tk.stages[0].padding) * tk.stages[0].dtype.itemsize + (
                MMA_ROWS * (score_row_elements(keys, self.products) + 1)
                + self.group_rows * (4 + self.splits + features)) * 4
        return (self.group_rows * (keys + 4 + self.splits) + (THREADS // kernel_ir.WARP_SIZE)
                * self.group_rows * features) * 4

    def reduction_text(self, tk: tile_ir.TileKernel) -> str:
        if self.splits == 1:
            return ", one block: softmax over the block's keys"
        return (", each block's maximum, sum and unscaled output to memory; the last block of a row group to "
                "finish combines them")

    def lines(self, tk: tile_ir.TileKernel) -> list[str]:
        if self.products == "tensor_cores":
            rows = (f"  rows: {self.group_rows} per block, reading the same keys and values, padded to the "
                    f"{MMA_ROWS} rows of mma.sync m16n8k16 on the tensor cores; {THREADS} threads, each warp a "
                    "quarter of the tile's keys for the scores and a quarter of the features for the output")
        else:
            rows = (f"  rows: {self.group_rows} per block, reading the same keys and values; {THREADS} threads, one "
                    "key each for the scores, the values' features 16 bytes per lane for the output")
        return [rows,
                f"  key tiles: {self.tiles_per_range} per range, online softmax across them; cp.async, 16 bytes "
                f"each, copies the tiles {tk.stages[0].buffers - 1} ahead into a ring of {tk.stages[0].buffers} "
                "buffers while the block works on one"]


def tile(d: DecodeAttention, target: Target, knobs: Mapping[str, Any]) -> tile_ir.TileKernel:
    choice, estimate, count = choose(d, target, knobs)
    pins = ", ".join(f"{k} = {v}" for k, v in sorted(_pinned(knobs, "").items())) or "none"
    a = d.loops
    keys = choice.keys_per_block
    grid = [tile_ir.AxisBinding(tuple(loop.var for loop in a.rows), d.rows_extent, "x", 1, d.group_rows, "x")]
    splits = choice.splits(d)
    reduction = tile_ir.ReductionPlan((a.key_var,), d.keys_extent, "split_k", choice.keys_per_tile, splits)
    tile = choice.keys_per_tile
    stages = [
        tile_ir.SharedStage(d.keys.buffer, loop_ir.format_value(d.keys), (a.key_var, a.dot_loop.var), (tile, d.depth),
                            d.dtype, d.vector, choice.stages, "cp.async", COPY_BYTES),
        tile_ir.SharedStage(d.values.buffer, loop_ir.format_value(d.values), (a.values_loop.var, a.feature_loop.var),
                            (tile, d.features), d.dtype, d.vector, choice.stages, "cp.async", COPY_BYTES),
    ]
    notes = [("chosen", f"{keys} keys per block in tiles of {tile}, {choice.stages} stages, {splits} key "
                        f"range{'s' if splits > 1 else ''}, products on the {choice.products.replace('_', ' ')}; "
                        f"cheapest of {count} settings, pinned: {pins}"
                        + (f"; weighed at {d.keys_extent} = {weighed_keys(d)} keys, the ranges' tiles "
                           "counted at run time" if sizes.is_symbolic(d.keys_extent) else "")),
             ("estimate", f"{estimate:.1f} us")]
    tk = tile_ir.TileKernel(kernel=d.kernel, schedule=SCHEDULE_NAME, grid=grid, reduction=reduction, stages=stages,
                            knobs=notes, settings=DecodeSettings(splits, d.group_rows, choice.tiles_per_range(d),
                                                           choice.products))
    tile_ir.verify_tile_kernel(tk, target.max_threads_per_block, target.max_shared_bytes_optin)
    return tk

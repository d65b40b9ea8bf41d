"""The attention schedule's knobs, its cost model and its Tile IR.

A block takes ``block_queries`` query rows of one batch and head (64 per consumer warpgroup)
and walks the keys ``block_keys`` at a time: the TMA copies each key block's keys and values
into a ring of ``stages`` buffers while the warpgroups work on the block before. Causal
attention walks only the key blocks that some query of the block sees.

The cost model is fitted to the H200: a key block of 128 queries by 128 keys takes a block
``KEY_BLOCK_US + KEY_BLOCK_US_PER_FEATURE * d`` (the products and the exponentials, the
softmax of one key block overlapping the values' product of the one before), a warpgroup of 64 queries
``ONE_WARPGROUP_SLOWDOWN`` times that with two such blocks on an SM (the kernel's registers
allow one block of two warpgroups, or two of one) and ``ONE_WARPGROUP_ALONE`` times it where
the blocks are no more than the SMs; each read of another buffer that the score makes adds
``SCORE_READ_NS`` per score and SM where it moves with the query (a bias of each score's own),
``KEY_READ_NS`` where it moves only with the key (a padding mask); two warpgroups taking turns
(``warpgroups = ping_pong``) take ``PING_PONG_SPEEDUP`` times less per key block. The blocks spread
over the SMs; the longest block bounds the kernel. The fit: ``experiments/attention_in_one_kernel/``.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any, Mapping

import attrs

from lamina.core.errors import ScheduleError
from lamina.core.ir import expr as ex, index, kernel_ir, loop_ir, tile_ir
from lamina.core.ir.kernel_ir import hopper_barriers
from lamina.core.target import Target
from lamina.plugins.schedules.attention.block_masks import reads, reads_by_query
from lamina.plugins.schedules.attention.recognise import Attention, analyse
from lamina.plugins.schedules.contraction.layout import SHARED_ALIGNMENT
from lamina.plugins.schedules.pinned_knobs import pinned_values

SCHEDULE_NAME = "attention"
ARCH = 90
"""TMA and wgmma are Hopper's (sm_90a)."""
PANEL = 64
"""Elements of a 16-bit row in one 128-byte swizzled row: the TMA's boxes are this wide."""
KNOB_NAMES = ("block_queries", "block_keys", "stages", "warpgroups")
BLOCK_QUERIES = (64, 128)
BLOCK_KEYS = (64, 128)
STAGES = (2, 3, 4)
"""The ring's stages; the cost model takes the most that keep as many blocks on an SM as its
registers allow: a stage is refilled only once every warpgroup has released it, so a deeper
ring gives the copies more time."""
IN_STEP, PING_PONG = "in_step", "ping_pong"
WARPGROUPS = (IN_STEP, PING_PONG)
"""How a block's two consumer warpgroups share the tensor cores: ``in_step``, each issuing its
products when its data is there (so both tend to compute their softmax at the same time), or
``ping_pong``, taking turns to issue them (FlashAttention-3's scheduling), so that one
warpgroup's softmax runs while the other's products keep the tensor cores busy."""
PING_PONG_SPEEDUP = 1.03
"""A key block of two warpgroups taking turns against the same in step, on rings of at least
``PING_PONG_STAGES``: the geometric mean over the suite's twelve bf16 cases of 512 to 8 192 tokens,
faster in ten of them (by up to 8 %) and 2 % slower in the two of 8 192 tokens without a mask
(``experiments/attention_ping_pong/``)."""
PING_PONG_STAGES = 3
"""Taking turns, the first warpgroup runs half a key block ahead, so the stage it waits for must be
refilled a block earlier: on rings of 2 stages it waits for the second's refill every key block
(the suite's cases 15 to 35 % slower than in step), so the cost model weighs turns on deeper rings."""
BLOCK_SHARED_RESERVE = 1024
"""Shared memory the driver keeps per block on Hopper: an SM has the opt-in maximum a block
may have plus one such reserve."""
MAX_ACCUMULATORS = 160
"""Float32 accumulators of the two products a thread holds at most (scores and output): 256
features in key blocks of 64 (Gemma's heads) hold 160, which NVRTC fits without spills in 231
of the 255 registers a thread of the kernel's blocks may have."""
MAX_FEATURES = 256
"""The wgmma's largest N, the values' features a block computes at once."""

KEY_BLOCK_US = 0.72
KEY_BLOCK_US_PER_FEATURE = 0.0108
"""A key block of 128 x 128 scores in a block of two warpgroups, by its features: fitted to the
suite's cases of 8 192 keys without a mask (``experiments/attention_overlap/``)."""
ONE_WARPGROUP_SLOWDOWN = 1.8
"""A 64-query block's key block, two such blocks sharing an SM."""
ONE_WARPGROUP_ALONE = 0.88
"""A 64-query block's key block, alone on its SM: BERT's 12 heads at 512 tokens."""
SCORE_READ_NS = 0.5
"""Per score, per read of a bias that moves with the query, on one SM: a decoder's mask, read at
each score, tripled the kernel in TinyLlama's layer before it was settled per key block."""
KEY_READ_NS = 0.12
"""Per score, per read that moves only with the key (BERT's padding mask), on one SM."""
LAUNCH_US = 2.0
REGISTER_BOUND_THREADS = 256
"""The kernel's threads use every register: an SM holds 256 of them, one block of two
warpgroups or two of one."""
@attrs.frozen
class AttentionChoice:
    block_queries: int
    block_keys: int
    stages: int
    warpgroups: str = IN_STEP

    @property
    def consumer_warpgroups(self) -> int:
        return self.block_queries // kernel_ir.WGMMA_M


def _read_pinned(knobs: Mapping[str, Any], where: str) -> dict[str, Any]:
    pinned = pinned_values(knobs, {"block_queries": BLOCK_QUERIES, "block_keys": BLOCK_KEYS, "stages": STAGES,
                                   "warpgroups": WARPGROUPS}, where)
    if pinned.get("warpgroups") == PING_PONG and pinned.get("block_queries", 128) != 128:
        raise ScheduleError(f"{where}: knob warpgroups = 'ping_pong' takes turns between two warpgroups: it needs "
                            f"block_queries = 128, not {pinned['block_queries']}")
    return pinned


def key_blocks(a: Attention, choice: AttentionChoice, query_block: int) -> int:
    """The key blocks that the queries of ``query_block`` see."""
    end = math.ceil(a.keys_extent / choice.block_keys)
    last_query = min(a.queries_extent, (query_block + 1) * choice.block_queries) - 1
    last = a.last_visible_key(ex.const(last_query))
    if last is not None:
        end = min(end, index.affine(last).constant // choice.block_keys + 1)
    return max(0, end - skipped_key_blocks(a, choice, query_block))


def _walked(a: Attention, choice: AttentionChoice, query_block: int) -> range:
    """The key blocks that the queries of ``query_block`` walk, counted from the first key."""
    first = skipped_key_blocks(a, choice, query_block)
    return range(first, first + key_blocks(a, choice, query_block))


def skipped_key_blocks(a: Attention, choice: AttentionChoice, query_block: int) -> int:
    """The key blocks wholly before the first key that any query of ``query_block`` sees (a sliding window)."""
    first = a.first_visible_key(ex.const(query_block * choice.block_queries))
    return 0 if first is None else max(0, index.affine(first).constant) // choice.block_keys


def shared_bytes(a: Attention, choice: AttentionChoice) -> int:
    item = a.dtype.itemsize
    panels = math.ceil(a.depth / PANEL)
    queries = panels * choice.block_queries * PANEL * item
    keys = choice.stages * panels * choice.block_keys * PANEL * item
    values = choice.stages * choice.block_keys * a.features * item
    flags = flag_bytes(a.keys_extent, choice.block_keys) if a.by_block.shown is not None else 0
    return queries + keys + values + barrier_bytes(choice.stages, choice.warpgroups) + flags


FLAG_BYTES = 4


def flag_bytes(keys: int, block_keys: int) -> int:
    """A word per key block: whether the padding shows every key of it (``block_masks``)."""
    return _aligned(FLAG_BYTES * math.ceil(keys / block_keys))


def barrier_bytes(stages: int, warpgroups: str = IN_STEP) -> int:
    """The queries' full barrier, each stage's full and empty barriers and, taking turns, each
    warpgroup's turn barrier, each array from a 16-byte boundary as the kernel lays them out."""
    turns = _aligned(2 * hopper_barriers.MBARRIER_BYTES) if warpgroups == PING_PONG else 0
    return _aligned(hopper_barriers.MBARRIER_BYTES) + 2 * _aligned(stages * hopper_barriers.MBARRIER_BYTES) + turns


def _aligned(size: int) -> int:
    return -(-size // SHARED_ALIGNMENT) * SHARED_ALIGNMENT


def problem(a: Attention, choice: AttentionChoice, target: Target) -> str | None:
    if choice.warpgroups == PING_PONG and choice.consumer_warpgroups != 2:
        return f"{choice.block_queries} queries are one warpgroup's: ping_pong takes turns between two"
    if a.queries_extent < kernel_ir.WGMMA_M:
        return (f"{a.queries_extent} queries, fewer than the {kernel_ir.WGMMA_M} rows of a wgmma: the attention_decode "
                "schedule takes a few queries")
    if choice.block_keys // 2 + a.features // 2 > MAX_ACCUMULATORS:
        return (f"{choice.block_keys} keys and {a.features} features need {choice.block_keys // 2 + a.features // 2} "
                f"accumulators per thread, more than {MAX_ACCUMULATORS}")
    if shared_bytes(a, choice) > target.max_shared_bytes_optin:
        return (f"{shared_bytes(a, choice)} B of shared memory exceed the {target.max_shared_bytes_optin} B "
                "a block may have")
    return None


def score_reads_us(a: Attention, target: Target) -> float:
    """What the score's reads cost for every score of the attention, spread over the SMs, where
    every score reads what the program's score reads (the scores computed apart)."""
    scores = a.batch_size * a.queries_extent * a.keys_extent
    return scores * reads(a.score) * SCORE_READ_NS * 1e-3 / target.sm_count


def _key_block_reads_ns(a: Attention, choice: AttentionChoice, query_block: int, key_block: int) -> float:
    """What the reads of each score of a key block cost, its mask settled over the block
    (``block_masks``), in nanoseconds on one SM."""
    first_query, first_key = query_block * choice.block_queries, key_block * choice.block_keys
    score = a.by_block.score_over(range(first_query, first_query + choice.block_queries),
                                  range(first_key, first_key + choice.block_keys))
    per_score, per_key = reads_by_query(score, a.query_var)
    return per_score * SCORE_READ_NS + per_key * KEY_READ_NS


def estimate_us(a: Attention, choice: AttentionChoice, target: Target) -> float:
    groups = choice.consumer_warpgroups
    query_blocks = math.ceil(a.queries_extent / choice.block_queries)
    sharing = a.batch_size * query_blocks > target.sm_count
    resident = 1
    if sharing:
        fitting = (target.max_shared_bytes_optin + BLOCK_SHARED_RESERVE) // (shared_bytes(a, choice)
                                                                            + BLOCK_SHARED_RESERVE)
        resident = max(1, min(REGISTER_BOUND_THREADS // (groups * kernel_ir.WARPGROUP_SIZE), fitting))
    per_key_block = (KEY_BLOCK_US + KEY_BLOCK_US_PER_FEATURE * a.depth) * choice.block_keys / 128
    if choice.warpgroups == PING_PONG:
        per_key_block /= PING_PONG_SPEEDUP
    if groups == 1:
        per_key_block *= ONE_WARPGROUP_SLOWDOWN if sharing else ONE_WARPGROUP_ALONE
    scores = kernel_ir.WGMMA_M * groups * choice.block_keys * resident  # a key block's, times the blocks sharing its SM
    blocks = [sum(per_key_block + scores * _key_block_reads_ns(a, choice, q, kb) * 1e-3
                  for kb in _walked(a, choice, q))
              for q in range(query_blocks)] * a.batch_size
    return LAUNCH_US + max(max(blocks, default=0.0), sum(blocks) / (target.sm_count * resident))


def choose(a: Attention, target: Target, knobs: Mapping[str, Any]) -> tuple[AttentionChoice, float, int]:
    """The cheapest setting the pins allow, its estimate in microseconds, and how many were weighed."""
    found = ranked(a, target, knobs)
    return found[0][1], found[0][0], len(found)


def ranked(a: Attention, target: Target, knobs: Mapping[str, Any],
           stages: tuple[int, ...] = STAGES) -> list[tuple[float, AttentionChoice]]:
    """Every setting the pins allow (of ``stages`` where they are not pinned) with its estimate,
    cheapest first; among equals larger blocks first, then the most stages the key blocks can fill,
    then the fewest stages; a ``ScheduleError`` where none can run."""
    where = f"kernel {a.kernel.name}, attention schedule"
    if target.compute_capability != ARCH:
        raise ScheduleError(f"{where}: the attention schedule runs on Hopper (sm_90) only")
    if a.features > MAX_FEATURES or a.features % 8:
        raise ScheduleError(f"{where}: {a.features} features per value; the schedule takes multiples of 8 up to "
                            f"{MAX_FEATURES}")
    pinned = _read_pinned(knobs, where)
    found, problems = _weighed(loop_ir.with_positional_names(a.kernel), target, tuple(sorted(pinned.items())),
                               tuple(stages))
    if not found:
        raise ScheduleError(f"{where}: no setting can run it: {'; '.join(problems)}")
    return list(found)


@functools.lru_cache(maxsize=256)
def _weighed(kernel: loop_ir.Kernel, target: Target, pinned: tuple[tuple[str, Any], ...],
             stages: tuple[int, ...]) -> tuple[tuple[tuple[float, AttentionChoice], ...], tuple[str, ...]]:
    """The settings ``ranked`` returns and why the others cannot run, once per kernel shape (its names
    erased): the fusion rule and the schedule weigh the same kernel of every layer of a model."""
    a, pins = analyse(kernel), dict(pinned)
    found, problems = [], []
    for queries, keys, stage_count, order in itertools.product(
            [pins["block_queries"]] if "block_queries" in pins else BLOCK_QUERIES,
            [pins["block_keys"]] if "block_keys" in pins else BLOCK_KEYS,
            [pins["stages"]] if "stages" in pins else stages,
            [pins["warpgroups"]] if "warpgroups" in pins else WARPGROUPS):
        choice = AttentionChoice(queries, keys, stage_count, order)
        if order == PING_PONG and "warpgroups" not in pins and (stage_count < PING_PONG_STAGES
                                                                 or choice.consumer_warpgroups != 2):
            continue  # turns need two warpgroups; on a shallow ring they run only where pinned
        why = problem(a, choice, target)
        if why is not None:
            problems.append(why)
            continue
        filled = min(stage_count, math.ceil(a.keys_extent / keys))
        estimate = estimate_us(a, choice, target)
        # equal estimates summed in another order differ in their last bits: rounded, they tie
        found.append((round(estimate, 6), -queries, -keys, -filled, stage_count, estimate, choice))
    ordered = tuple((estimate, choice) for *_, estimate, choice in sorted(found, key=lambda f: f[:5]))
    return ordered, tuple(dict.fromkeys(problems))


VALUES_ALONG_FEATURES = " (staged as they lie, along the features, and transposed by the wgmma)"


@attrs.frozen
class AttentionSettings(tile_ir.ScheduleSettings):
    """What the bindings do not say: the key blocks' size, the ring's stages, the warpgroups."""

    block_keys: int
    stages: int
    consumer_warpgroups: int
    causal: bool
    mask_by_block: str | None = None
    """How the score's mask is settled per key block (``block_masks.BlockScores.text``), if it is."""
    values_along_features: bool = False
    """Whether the values are staged as they lie, along the features (N-major), not along the keys."""
    windowed: bool = False
    """Whether each query sees only the keys from a distance behind it on (a sliding window)."""
    key_block_flags: bool = False
    """Whether the kernel keeps a flag per key block: the padding shows every key of it."""
    warpgroups: str = IN_STEP
    """Whether the two consumer warpgroups take turns at the tensor cores (``WARPGROUPS``)."""

    def extra_threads(self, tk: tile_ir.TileKernel) -> int:
        """The 4 threads across each query row of a wgmma accumulator: the bindings count one."""
        return 3 * kernel_ir.WARP_SIZE * self.consumer_warpgroups

    def shared_bytes(self, tk: tile_ir.TileKernel) -> int:
        flags = flag_bytes(tk.reduction.extent, self.block_keys) if self.key_block_flags else 0
        return barrier_bytes(self.stages, self.warpgroups) + flags

    def reduction_text(self, tk: tile_ir.TileKernel) -> str:
        return ", one pass: online softmax (running maximum and sum, earlier sums rescaled)"

    def lines(self, tk: tile_ir.TileKernel) -> list[str]:
        dtype = tk.stages[0].dtype
        keys = self.block_keys
        features = tk.stages[2].tile[1] if self.values_along_features else tk.stages[2].tile[0]
        groups = "1 consumer warpgroup" if self.consumer_warpgroups == 1 else \
            f"{self.consumer_warpgroups} consumer warpgroups"
        turns = self.warpgroups == PING_PONG
        refiller = "the first thread of the second warpgroup" if turns else "thread 0"
        lines = [
            f"  copies: thread 0 issues the TMA loads of the queries once and of each key block's keys and values "
            f"into a ring of {self.stages} stages, each with a full and an empty mbarrier, refilled by {refiller} "
            "once every warpgroup has released it",
            f"  products on tensor cores: {groups} of 64 query rows; per key block, wgmma m64n{keys}k16 on {dtype} "
            f"gives the scores, the probabilities stay in registers in {dtype} as the A of wgmma m64n{features}k16, "
            f"which adds them times the values{VALUES_ALONG_FEATURES if self.values_along_features else ''}; "
            "f32 accumulators",
            "  overlap: each key block's scores are issued before the values' product of the block before, whose "
            "wgmma runs while the warpgroup computes the softmax",
        ]
        if turns:
            lines.append("  ping-pong: the two warpgroups take turns to issue a key block's products, each turn an "
                         "mbarrier that the other warpgroup arrives on once it has issued its own, so that one's "
                         "softmax runs while the other's products use the tensor cores")
        if self.causal:
            lines.append("  causal: key blocks past the block's last visible key are skipped")
        if self.windowed:
            lines.append("  sliding window: key blocks before the block's first visible key are skipped")
        if self.mask_by_block is not None:
            lines.append(f"  mask by key block: {self.mask_by_block}")
        return lines


def tile(a: Attention, target: Target, knobs: Mapping[str, Any]) -> tile_ir.TileKernel:
    causal = a.last_visible_key(ex.Var(a.query_var)) is not None
    windowed = a.first_visible_key(ex.Var(a.query_var)) is not None
    choice, estimate, count = choose(a, target, knobs)
    pins = ", ".join(f"{k} = {v}" for k, v in sorted(_read_pinned(knobs, "").items())) or "none"
    groups = choice.consumer_warpgroups
    grid = [tile_ir.AxisBinding((a.query_var,), a.queries_extent, "x", kernel_ir.WARP_SIZE * groups, 2, "x",
                                contiguous=False)]
    if a.batch:
        grid.append(tile_ir.AxisBinding(a.batch, a.batch_size, "y", 1, 1, "y"))
    panels = math.ceil(a.depth / PANEL)
    along_features = a.values_along_features
    scores, values = a.scores, a.values
    queries, keys = a.queries.operand, a.keys.operand
    item = a.dtype.itemsize
    stages = [
        tile_ir.SharedStage(queries.load.buffer, queries.text, (scores.m, scores.reduce_var),
                            (choice.block_queries, panels * PANEL), a.dtype, 0, 1, "tma",
                            choice.block_queries * panels * PANEL * item, kernel_ir.SWIZZLE_BYTES),
        tile_ir.SharedStage(keys.load.buffer, keys.text, (scores.n, scores.reduce_var),
                            (choice.block_keys, panels * PANEL), a.dtype, 0, choice.stages, "tma",
                            choice.block_keys * panels * PANEL * item, kernel_ir.SWIZZLE_BYTES),
        tile_ir.SharedStage(a.value_rows.operand.load.buffer, a.value_rows.operand.text,
                            (values.reduce_var, values.n) if along_features else (values.n, values.reduce_var),
                            (choice.block_keys, a.features) if along_features else (a.features, choice.block_keys),
                            a.dtype, 0, choice.stages, "tma", a.features * choice.block_keys * item,
                            kernel_ir.SWIZZLE_BYTES),
    ]
    reduction = tile_ir.ReductionPlan((a.key_var,), a.keys_extent, "serial", choice.block_keys)
    turns = ", warpgroups in turn" if choice.warpgroups == PING_PONG else ""
    notes = [("chosen", f"{choice.block_queries} queries x {choice.block_keys} keys, {choice.stages} stages{turns}; "
                        f"cheapest of {count} settings, pinned: {pins}"),
             ("estimate", f"{estimate:.1f} us")]
    tk = tile_ir.TileKernel(
        kernel=a.kernel, schedule=SCHEDULE_NAME, grid=grid, reduction=reduction, stages=stages, knobs=notes,
        settings=AttentionSettings(choice.block_keys, choice.stages, groups, causal, a.by_block.text(not causal),
                                   along_features, windowed, a.by_block.shown is not None, choice.warpgroups))
    tile_ir.verify_tile_kernel(tk, target.max_threads_per_block, target.max_shared_bytes_optin)
    return tk

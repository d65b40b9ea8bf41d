"""The cost model that picks the contraction schedule's knobs without running anything.

``candidates`` lists the settings worth considering for a kernel's shape: block tiles of
16 to 128 along each output axis (powers of two, smaller only for an axis shorter than
16, as in decoding where M = 1), register tiles of 2 to 8 per thread along each axis (1
only in blocks with such a short axis; square otherwise), 32 to 256 threads in whole warps,
and, where a block's threads would be one or two warps, enough k-splits inside the block
(each whole warps) to bring it to 128 threads. ``block_k``, ``buffers``, the
padding and the fragment width (4 wherever it is legal, else 1) follow from those by
rule, and any knob may be pinned instead. On Hopper, a float32 product of two operands
stored K-major also gets the settings of Hopper's ``wgmma`` (``wgmma.products``: blocks
of 64 or 128 by 64 or 128), which on the H200 ran every linear of the suite and both
attention-score products faster than the FMA kernels (those took 1.14 to 1.41x as long), the
linears closer to float64 than cuBLAS (``experiments/tensor_cores/``).
``products = fma`` keeps FMAs; ``products = mma_sync`` runs ``mma.sync`` (``mma_sync.products``),
whose three tf32 products ran no faster than the FMA kernels, as
``TENSOR_CORE_EFFICIENCY`` records, and which the model uses only where it is pinned.

``estimate`` is a roofline with a tail:

* blocks run ``ceil(blocks / sm_count)`` deep on the busiest SM (the tail effect of the
  last, partial wave), each SM at ``fp32_flops_per_us / sm_count`` scaled by an efficiency
  that grows with the register tile, because a bigger tile needs fewer shared-memory reads
  per multiply-add: 2x2 reaches ~25 % of SGEMM, 4x4 ~60 %, 8x8 ~85 % (``EFFICIENCY``),
  measured with single-element reads. Reading the register tile's rows and columns in
  16-byte runs of four (``fragment_width`` 4) issues a quarter of the shared-memory load
  instructions; that is assumed to add 15 % (``FRAGMENT_GAIN``, in line with the ~13 %
  that vectorised shared reads add to published SIMT SGEMM kernels), up to 95 % of SGEMM;
* global bytes: every block reads its operands' k-tiles, so an operand is read again for
  every block along the other output axis (the block tile's reuse), at
  ``memory_bytes_per_us``;
* two more things slow the arithmetic: k-splits inside a block (each split's threads do
  their share of a k-tile between the same barriers, and the block adds the splits' tiles
  up at the end: ``K_SPLIT_COST`` per extra split), and small block tiles, which stage
  more operand elements per multiply-add (``block_reuse_efficiency``);
* both need enough warps on a busy SM to hide latency: fewer than 8 resident warps starve
  the FMA pipes (4, one per scheduler, for 8 x 8 register tiles, whose 64 independent
  multiply-adds hide the latency themselves) and fewer than 16 the memory system, in
  proportion; an SM without a block adds nothing to the bandwidth;
* on the tensor cores, the arithmetic runs at a third of the target's tf32 mma rate, scaled
  by ``TENSOR_CORE_EFFICIENCY`` instead; through wgmma (``wgmma_compute_us``), a block's
  k-tiles run at a third of the target's wgmma rate scaled by ``WGMMA_EFFICIENCY``, and
  each block adds a fixed cost, which blocks resident on the same SM overlap; its global
  bytes are each operand once and the outputs, since its 64- and 128-row k-tiles are read
  again from L2, at a rate the fitted efficiency already holds;
* the estimate is ``launch_us + max(compute, memory) + OVERLAP_LOSS * min(compute, memory)``:
  copies and arithmetic overlap, but not perfectly.
Residency per SM follows Hopper's limits: 2048 threads, 64 Ki registers, 228 KiB of
shared memory, 32 blocks.
"""

from __future__ import annotations

import itertools
import math

import attrs

from lamina.core.errors import NoSettingRuns, ScheduleError
from lamina.core.target import Target
from lamina.plugins.schedules.contraction import tiling
from lamina.plugins.schedules.contraction.mma_sync import products as mma_sync
from lamina.plugins.schedules.contraction.wgmma import products as wgmma_products
from lamina.plugins.schedules.contraction.wgmma_tma import cost as tma_cost, setting as tma_setting
from lamina.plugins.schedules.contraction.knobs import FMA, FRAGMENT_WIDTHS, WGMMA, Choices, pins_text
from lamina.plugins.schedules.contraction.recognise import Contraction

BLOCK_TILES = (1, 2, 4, 8, 16, 32, 64, 128)
THREAD_TILES = (1, 2, 4, 8)
SPLITS = (1, 2, 4, 8)
FULL_BLOCK = 16
"""Axes at least this long get block tiles of at least this size and register tiles of at least 2."""
MIN_THREADS, MAX_THREADS = 32, 256
SPLIT_BELOW_THREADS = 64
"""k-splits are considered only for blocks with at most this many threads without them ..."""
SPLIT_THREADS = 128
"""... and as many as bring the block to this many threads."""
EFFICIENCY = {1: 0.10, 2: 0.18, 4: 0.25, 8: 0.42, 16: 0.60, 32: 0.75, 64: 0.85}
"""Fraction of SGEMM throughput, by the number of outputs in a thread's register tile."""
FRAGMENT_GAIN = {1: 1.0, 4: 1.15}
"""How much faster the arithmetic runs when a thread reads its fragments this many elements at once."""
MAX_EFFICIENCY = 0.95
TENSOR_CORE_EFFICIENCY = {4: 0.12, 16: 0.28, 64: 0.43}
"""Fraction of a third of ``Target.tf32_tensor_flops_per_us`` (three products per multiply-add)
that tensor-core products reach, by the outputs in a thread's register tile. On the H200,
8 x 8 tiles in 64 x 128 blocks ran the suite's M = 2048 linears at about 46 TFLOP/s and 4 x 4
tiles at about 30 (``experiments/tensor_cores/``);
2 x 2 was not measured and is put at the same share of 4 x 4 as with FMAs."""
WGMMA_EFFICIENCY = {(128, 64): 0.77, (128, 128): 0.95, (64, 64): 0.65, (64, 128): 0.77}
"""Fraction of a third of ``Target.tf32_wgmma_flops_per_us`` that a block's k-tiles reach, by
its rows and columns: fitted, with ``WGMMA_BLOCK_US``, to the suite's eight M = 2048 linears
and two score products in each of the four blocks on the H200. The model gives their times
within 4.4 % on average; on eight of the ten products it ranks the fastest measured block
first, on Qwen's scores one that took 1.2 % longer, and on TinyLlama's qkv projection, where it
puts the two 128-row blocks within 0.5 % of each other, one that took 5.0 % longer
(``experiments/tensor_cores/wgmma_cost_check.py`` prints the comparison). A block of two warpgroups shares
each k-tile of B between them, and a wider wgmma reads each value of A for more columns."""
WGMMA_BLOCK_US = 1.25
"""What a wgmma block costs besides its k-tiles, per 128 x 64 of its tile, which blocks
resident on the same SM overlap: its first copies' trip to memory, and the end of its stores.
It decides between block shapes where a block has few k-tiles: the attention scores'
products (2 and 4 k-tiles) run faster in 128 x 64 blocks, two per SM, than in 128 x 128, one
per SM, and the linears (64 k-tiles and more) the other way round."""
STAGED_COPIES_PER_US_PER_SM = 3700
"""Copies into shared memory (an element, or a 16-byte run) that an SM's threads issue per
microsecond when they stage 16-bit wgmma operands: each copy of a convolution's window computes
its address and its bounds, which takes longer than the tensor cores take for the products.
Fitted to the first convolution of the model matrix's CNN (3 to 64 channels on 224 x 224, one
k-tile a block), as timed in ``benchmarks/results/2026-12-03_h200_profile_cnn_b1_s224_bf16.json``;
the model then gives the CNN's three blocks within a tenth of their measured total."""
FIXED_BY_WGMMA = ("block_k", "thread_m", "thread_n", "splits", "padding", "fragment_width", "warp_columns",
                  "copy_steps")
"""Knobs whose values wgmma fixes: pinning one without ``products`` keeps to FMAs."""
REGISTERS_PER_SM = 65536
SHARED_BYTES_PER_SM = 228 * 1024
BLOCKS_PER_SM = 32
WARPS_TO_FEED_FMA = 8
WARPS_TO_FEED_MEMORY = 16
K_SPLIT_COST = 0.10
"""How much slower the arithmetic runs for each k-split inside a block beyond the first."""
FULL_REUSE = 128 * 64 / (128 + 64)
"""Outputs per staged operand element of a 128 x 64 block tile, which runs as fast as 128 x 128."""
DEEP_BLOCK = 128 * 64
"""Blocks this large, with copies through registers, take three buffers (``default_buffers``)."""
OVERLAP_LOSS = 0.25
"""Copies and arithmetic overlap imperfectly: this much of the shorter one adds to the longer."""


@attrs.frozen
class Estimate:
    total_us: float
    compute_us: float
    memory_us: float
    launch_us: float
    blocks: int
    resident: int

    def text(self) -> str:
        return (
            f"{self.total_us:.1f} us from launch {self.launch_us:.1f}, compute {self.compute_us:.1f} and memory "
            f"{self.memory_us:.1f}, overlapped; {self.blocks} blocks, {self.resident} per SM at once"
        )


def register_tile_efficiency(outputs: int, table: dict[int, float] = EFFICIENCY) -> float:
    """The efficiency in ``table`` of the largest listed register tile no bigger than ``outputs``."""
    return table[max(n for n in table if n <= outputs)]


def warps_to_feed_fma(choices: Choices) -> int:
    """Resident warps that keep an SM's FMA pipes busy.

    On the H200, M = 128 linears in blocks of four warps with 8 x 8 register tiles, one
    block per SM, ran about 90 % as fast per SM as blocks of eight warps, where eight were
    assumed to be needed (``experiments/contraction_tiling/``).
    """
    return 4 if choices.thread_m * choices.thread_n >= 64 else WARPS_TO_FEED_FMA


def block_reuse_efficiency(choices: Choices) -> float:
    """The arithmetic's speed relative to a 128 x 64 block tile, by the outputs each staged
    operand element feeds, ``bm * bn / (bm + bn)``, to the fourth root.

    With 8 x 8 register tiles on the H200, 64 x 64 blocks (in two k-splits) ran ~15 % slower
    per SM than 128 x 64 and 128 x 128 blocks, which ran alike
    (``experiments/contraction_tiling/``): 7 % from here, the
    rest from ``K_SPLIT_COST``.
    """
    reuse = choices.block_m * choices.block_n / (choices.block_m + choices.block_n)
    return min(1.0, reuse / FULL_REUSE) ** 0.25


def _pow2_ceil(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _block_tiles(extent: int, relaxed: bool) -> list[int]:
    high = min(BLOCK_TILES[-1], _pow2_ceil(extent))
    low = 1 if relaxed else min(FULL_BLOCK, high)
    return [b for b in BLOCK_TILES if low <= b <= high]


def _thread_tiles(block: int, other_block: int, relaxed: bool) -> list[int]:
    smallest = 1 if relaxed or min(block, other_block) < FULL_BLOCK else 2
    return [t for t in THREAD_TILES if smallest <= t <= block and block % t == 0]


def default_block_k(c: Contraction, splits: int) -> int:
    """16 deep, 32 where split eight ways (four rows a split), but no deeper than the reduction
    needs, and whole k-tiles of every split-K slice."""
    depth = min(max(16, 4 * splits), max(8, splits, _pow2_ceil(c.reduce_extent)))
    while c.slice_bound is not None and c.slice_bound.multiple % depth and depth > splits:
        depth //= 2
    return depth


def default_buffers(c: Contraction, block_m: int, block_n: int, block_k: int, target: Target) -> int:
    """One k-tile needs one buffer. Copies with ``cp.async`` take two, so that the next k-tile's
    copy overlaps this one's arithmetic; copies through registers take three in blocks of
    128 x 64 and more, with at least three k-tiles.

    On the H200, in two alternating runs of each, two buffers instead of three made the sixteen
    fp32 linears of the benchmark suite 1.1 % faster in the geomean (0 to 5 % faster on
    fourteen, 1.3 and 0.2 % slower on two) and the attention scores at S = 2048 0.6 to 1.0 %
    faster: a k-tile of those blocks' arithmetic takes longer than a copy's trip to memory.
    The bf16 ones, whose 2-byte elements are copied through registers, ran 2 to 9 % slower
    with two (``experiments/contraction_tiling/``).
    """
    k_tiles = math.ceil(c.reduce_extent / block_k)
    if k_tiles == 1:
        return 1
    through_registers = any(tiling.copy_kind(target, o.load.dtype.itemsize) != "cp.async" for o in c.operands)
    return 3 if through_registers and k_tiles >= 3 and block_m * block_n >= DEEP_BLOCK else 2


def _splits(threads: int, relaxed: bool) -> list[int]:
    """No split, or as many k-splits as bring a small block to 128 threads (at most 8).

    Each split is whole warps, so that a warp's shared-memory reads stay on one row of a tile.
    """
    if relaxed:
        return list(SPLITS)
    if threads > SPLIT_BELOW_THREADS or threads % 32:
        return [1]
    return sorted({1, min(SPLITS[-1], max(1, SPLIT_THREADS // threads))})


def _settings(c: Contraction, pinned: dict[str, int], relaxed: bool, target: Target):
    def values(key, default):
        return [pinned[key]] if key in pinned else default

    if any(k in pinned for k in tma_setting.TMA_ONLY):
        return
    for block_m in values("block_m", _block_tiles(c.extents[c.m], relaxed)):
        for block_n in values("block_n", _block_tiles(c.extents[c.n], relaxed)):
            for thread_m, thread_n in itertools.product(
                values("thread_m", _thread_tiles(block_m, block_n, relaxed)),
                values("thread_n", _thread_tiles(block_n, block_m, relaxed)),
            ):
                if block_m % thread_m or block_n % thread_n:
                    continue
                if not relaxed and min(thread_m, thread_n) > 1 and thread_m != thread_n:
                    continue
                base = (block_m // thread_m) * (block_n // thread_n)
                for splits in values("splits", _splits(base, relaxed)):
                    threads = base * splits
                    if not relaxed and (threads % 32 or not MIN_THREADS <= threads <= MAX_THREADS):
                        continue
                    block_k = pinned.get("block_k", default_block_k(c, splits))
                    buffers = pinned.get("buffers", default_buffers(c, block_m, block_n, block_k, target))
                    for products in values("products", [FMA]):
                        if products == WGMMA:
                            continue
                        yield Choices(block_m, block_n, block_k, thread_m, thread_n, splits, buffers,
                                      pinned.get("padding"), pinned.get("fragment_width", 1),
                                      pinned.get("warp_columns"), pinned.get("grouped_rows"),
                                      pinned.get("copy_steps"), products)


def _wgmma_settings(c: Contraction, pinned: dict[str, int], target: Target):
    """The wgmma settings (``products = wgmma``), each block shape with its one setting of the
    other knobs, three buffers where shared memory allows (``_fitted`` lowers them): wherever
    ``products = wgmma`` is pinned, and on Hopper where neither it nor a knob that wgmma fixes
    is (``tiling.illegal`` drops them where the product cannot run on wgmma). Sixteen-bit
    products are offered them only where the TMA cannot read an operand: the TMA GEMM is faster
    wherever it runs."""
    if "products" in pinned:
        if pinned["products"] != WGMMA:
            return
    elif (target.compute_capability != wgmma_products.ARCH or any(k in pinned for k in FIXED_BY_WGMMA)
          or any(k in pinned for k in tma_setting.TMA_ONLY)):
        return
    if "products" not in pinned and wgmma_products.sixteen_bit(c) and tma_setting.operands_problem(c) is None:
        return
    for block_m, block_n in itertools.product(wgmma_products.BLOCK_MS, wgmma_products.BLOCK_NS):
        choices = wgmma_products.choices_for(block_m, block_n, pinned.get("buffers", 3), wgmma_products.block_k(c))
        yield attrs.evolve(choices, **{k: v for k, v in pinned.items() if k != "buffers"})


def _fitted(c: Contraction, choices: Choices, pinned: dict[str, int], target: Target) -> Choices | None:
    """``choices`` with the widest legal fragments, and fewer buffers than the rule asks where
    shared memory is short, if legal."""
    if tma_setting.uses(choices):
        return choices if tiling.illegal(c, choices, target) is None else None
    widths = [pinned["fragment_width"]] if "fragment_width" in pinned else FRAGMENT_WIDTHS
    if wgmma_products.uses(choices):
        widths = [choices.fragment_width]
    counts = [choices.buffers] if "buffers" in pinned else range(choices.buffers, 0, -1)
    for width, buffers in itertools.product(widths, counts):
        fitted = attrs.evolve(choices, buffers=buffers, fragment_width=width)
        if tiling.illegal(c, fitted, target) is None:
            return fitted
    return None


def candidates(c: Contraction, target: Target, pinned: dict[str, int] | None = None,
               cuda_cores: bool = True) -> list[Choices]:
    """Every legal setting the cost model chooses among, in a fixed order (without ``cuda_cores``,
    only the wgmma's).

    Pinned knobs keep their values; where they, or shapes too small for the usual ranges
    (a 1x1 convolution of 13 channels on a 2x2 image), leave no setting there, the ranges
    widen to every legal setting.
    """
    pinned = pinned or {}
    for relaxed in (False, True):
        found: dict[Choices, None] = {}  # in the order found
        cuda_core_settings = _settings(c, pinned, relaxed, target) if cuda_cores else ()
        for choices in itertools.chain(cuda_core_settings, _wgmma_settings(c, pinned, target),
                                       tma_setting.settings(c, pinned, target)):
            fitted = _fitted(c, choices, pinned, target)
            if fitted is not None:
                found.setdefault(fitted)
        if found:
            return list(found)
    return []


def estimate(c: Contraction, choices: Choices, target: Target) -> Estimate:
    if tma_setting.uses(choices):
        compute_us, memory_us, blocks, resident = tma_cost.compute_and_memory_us(c, choices, target)
        total = target.launch_us + max(compute_us, memory_us) + OVERLAP_LOSS * min(compute_us, memory_us)
        return Estimate(total, compute_us, memory_us, target.launch_us, blocks, resident)
    batch = math.prod(c.extents[v] for v in c.batch)
    m_blocks = math.ceil(c.extents[c.m] / choices.block_m)
    n_blocks = math.ceil(c.extents[c.n] / choices.block_n)
    blocks = m_blocks * n_blocks * batch
    warps = math.ceil(choices.threads / 32)
    registers = math.ceil(tiling.registers(c, choices) / 8) * 8
    shared = tiling.shared_bytes(c, choices, target)
    resident = max(1, min(
        BLOCKS_PER_SM,
        target.max_threads_per_sm // choices.threads,
        REGISTERS_PER_SM // (registers * choices.threads),
        SHARED_BYTES_PER_SM // shared if shared else BLOCKS_PER_SM,
    ))
    deepest = math.ceil(blocks / target.sm_count)
    busy_sms = min(blocks, target.sm_count)
    active_warps = min(deepest, resident) * warps
    k_tiles = math.ceil(c.reduce_extent / choices.block_k)

    written = sum(c.buffer_bytes(s.buffer) for s in c.epilogue)
    if wgmma_products.uses(choices):
        compute_us = wgmma_compute_us(choices, target, deepest, resident, k_tiles, wgmma_products.sixteen_bit(c))
        if wgmma_products.sixteen_bit(c):
            copies = sum(math.prod(stage.tile) * stage.dtype.itemsize // stage.copy_bytes
                         for stage in (tiling.stage_for(c, o, choices, target) for o in c.operands))
            compute_us = max(compute_us, deepest * k_tiles * copies / STAGED_COPIES_PER_US_PER_SM)
        moved = sum(c.buffer_bytes(o.load.buffer) for o in c.operands) + written
    else:
        block_flops = 2 * choices.block_m * choices.block_n * k_tiles * choices.block_k
        outputs = choices.thread_m * choices.thread_n
        if choices.on_tensor_cores:
            tile_efficiency = register_tile_efficiency(outputs, TENSOR_CORE_EFFICIENCY)
            flops_per_us = target.tf32_tensor_flops_per_us / mma_sync.PRODUCTS
        else:
            tile_efficiency = min(MAX_EFFICIENCY,
                                  register_tile_efficiency(outputs) * FRAGMENT_GAIN[choices.fragment_width])
            flops_per_us = target.fp32_flops_per_us
        efficiency = (tile_efficiency * min(1.0, active_warps / warps_to_feed_fma(choices))
                      * block_reuse_efficiency(choices) / (1 + K_SPLIT_COST * (choices.splits - 1)))
        sm_flops_per_us = flops_per_us / target.sm_count
        compute_us = deepest * block_flops / (sm_flops_per_us * efficiency)
        read = sum(math.prod(tiling.stage_for(c, o, choices, target).tile) * o.load.dtype.itemsize
                   for o in c.operands)
        moved = blocks * k_tiles * read + written
    bandwidth = target.memory_bytes_per_us * busy_sms / target.sm_count
    memory_us = moved / (bandwidth * min(1.0, active_warps / WARPS_TO_FEED_MEMORY))
    total = target.launch_us + max(compute_us, memory_us) + OVERLAP_LOSS * min(compute_us, memory_us)
    return Estimate(total, compute_us, memory_us, target.launch_us, blocks, resident)


def wgmma_compute_us(choices: Choices, target: Target, deepest: int, resident: int, k_tiles: int,
                     sixteen_bit: bool = False) -> float:
    """The busiest SM's time for its ``deepest`` wgmma blocks: their k-tiles one after another
    on its tensor cores, and each block's fixed cost (``WGMMA_BLOCK_US``), which the blocks
    resident at once overlap. Sixteen-bit products run one wgmma per value at the target's
    16-bit rate, taken to reach the same fraction of it as the float32 blocks (not fitted apart:
    their staging, ``STAGED_COPIES_PER_US_PER_SM``, is what bounds them)."""
    efficiency = WGMMA_EFFICIENCY[choices.block_m, choices.block_n]
    rate = target.bf16_tensor_flops_per_us if sixteen_bit else target.tf32_wgmma_flops_per_us / mma_sync.PRODUCTS
    sm_flops_per_us = rate / target.sm_count * efficiency
    k_tile_us = 2 * choices.block_m * choices.block_n * choices.block_k / sm_flops_per_us
    block_us = WGMMA_BLOCK_US * choices.block_m * choices.block_n / (128 * 64)
    return deepest * k_tiles * k_tile_us + deepest * block_us / min(resident, deepest)


def choose(c: Contraction, target: Target, pinned: dict[str, int], where: str) -> tuple[Choices, Estimate, int]:
    """The cheapest setting, its estimate, and how many settings there were to choose from.

    Only settings the kernel can run are ranked (``candidates``). Where there are none, the
    error names the pinned knobs; with none pinned it is ``NoSettingRuns``, so that the next
    schedule takes the kernel.

    Where a wgmma setting is already cheaper than any setting of the CUDA cores' products could be
    (``cuda_core_floor_us``), those are not weighed: checking them was a third of a model's search,
    for products that always ran on the wgmma."""
    wgmma = [(s, estimate(c, s, target)) for s in candidates(c, target, pinned, cuda_cores=False)]
    if wgmma and min(e.total_us for _, e in wgmma) < cuda_core_floor_us(c, target):
        best = min(range(len(wgmma)), key=lambda i: (wgmma[i][1].total_us, i))
        return wgmma[best][0], wgmma[best][1], len(wgmma)
    settings = ranked(c, target, pinned, where)
    return settings[0][0], settings[0][1], len(settings)


def cuda_core_floor_us(c: Contraction, target: Target) -> float:
    """Less than any setting of FMAs or ``mma.sync`` can be estimated at: the launch and every product
    at the best share of either's rate that ``estimate`` grants (``MAX_EFFICIENCY``,
    ``TENSOR_CORE_EFFICIENCY``)."""
    products = (c.extents[c.m] * c.extents[c.n] * c.reduce_extent * math.prod(c.extents[v] for v in c.batch))
    rate = max(target.fp32_flops_per_us * MAX_EFFICIENCY,
               target.tf32_tensor_flops_per_us / mma_sync.PRODUCTS * max(TENSOR_CORE_EFFICIENCY.values()))
    return target.launch_us + 2 * products / rate


def products(c: Contraction) -> int:
    """The multiply-adds of ``c`` (a gate and its up projection summed side by side count twice)."""
    return (c.extents[c.m] * c.extents[c.n] * c.reduce_extent * math.prod(c.extents[v] for v in c.batch)
            * (2 if c.paired is not None else 1))


def floor_of_work_us(multiply_adds: int, written_bytes: int, target: Target) -> float:
    """Less than any setting of a product of that many multiply-adds that writes that many bytes can
    be estimated at: the launch, the multiply-adds at the fastest rate any setting is granted (the
    16-bit tensor cores' best tile on a lightly loaded GPU), the writes at the memory's pace. The
    split-K search skips the slice counts whose partial sums could not pay even at this floor."""
    best_share = max(1.0, max(tma_cost.TILE_EFFICIENCY.values()) * tma_cost.light_load_speedup(1, target.sm_count))
    rate = best_share * max(target.bf16_tensor_flops_per_us, target.tf32_wgmma_flops_per_us,
                            target.tf32_tensor_flops_per_us, target.fp32_flops_per_us)
    return target.launch_us + max(2 * multiply_adds / rate, written_bytes / target.memory_bytes_per_us)


def ranked(c: Contraction, target: Target, pinned: dict[str, int], where: str) -> list[tuple[Choices, Estimate]]:
    """Every setting the kernel can run with ``pinned``, with its estimate, cheapest first (ties in
    the order ``candidates`` gives); raises as ``choose`` does where there is none."""
    settings = candidates(c, target, pinned)
    if not settings:
        raise (ScheduleError if pinned else NoSettingRuns)(_nothing_legal(c, target, pinned, where))
    estimates = [estimate(c, s, target) for s in settings]
    order = sorted(range(len(settings)), key=lambda i: (estimates[i].total_us, i))
    return [(settings[i], estimates[i]) for i in order]


def _nothing_legal(c: Contraction, target: Target, pinned: dict[str, int], where: str) -> str:
    pins = f" with {pins_text(pinned, ' = ')}" if pinned else ""
    settings = itertools.chain(_settings(c, pinned, relaxed=True, target=target), _wgmma_settings(c, pinned, target),
                               tma_setting.settings(c, pinned, target))
    reasons = sorted({tiling.illegal(c, s, target) or "" for s in settings} - {""})
    why = "; ".join(reasons) if reasons else "no block tile is a whole number of register tiles"
    advice = " Pin other values, or unpin some of these knobs." if pinned else ""
    return f"{where}: no setting{pins} can run: {why}.{advice}"

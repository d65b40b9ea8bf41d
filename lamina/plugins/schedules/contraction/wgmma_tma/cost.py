"""What the cost model expects of a ``products = wgmma_tma`` block.

The busiest SM runs its blocks' k-tiles one after another on its tensor cores at a share
of ``Target.bf16_tensor_flops_per_us`` (what cuBLAS's bf16 GEMM reaches) that grows with the
block's tile (``TILE_EFFICIENCY``: a wider wgmma reads each row of A for more columns, and
two consumer warpgroups share each k-tile of B) and with the ring's depth
(``STAGE_EFFICIENCY``: two stages leave one k-tile's copy in flight while the wgmma read the
other, too little to hide a trip to memory). Each block adds a fixed cost (``BLOCK_US``:
its barriers' setup, the first copies' trip to memory before any wgmma, its epilogue) that
blocks resident on the same SM overlap. Global bytes are each operand once and the
outputs, the operands' k-tiles being read again from L2, at the memory's pace or, where few SMs
work, at the pace at which each SM takes its blocks' k-tiles from L2 (``SM_COPY_BYTES_PER_US``).
An SM's tensor cores reach more of their peak where few SMs work (``LIGHT_LOAD_SPEEDUP``): the
target's rate is cuBLAS's with every SM busy, held back by the chip's power and clocks.

The efficiencies are fitted to every setting of this kernel timed on the suite's bf16 linears
at 512 and 2 048 rows on the H200 (``experiments/wgmma_tma_tiles/``). What they must also get
right is where this setting does not belong: a block of 64 rows per
output row of a decoding step (M = 1) does 64 times the arithmetic, and a kernel of a few
blocks pays the fixed cost; there the CUDA cores' settings stay cheaper.
"""

from __future__ import annotations

import math

from lamina.core.ir import expr as ex, loop_ir
from lamina.core.target import Target
from lamina.plugins.schedules.contraction.knobs import Choices
from lamina.plugins.schedules.contraction.recognise import Contraction
from lamina.plugins.schedules.contraction.wgmma_tma import cluster_slices, setting

TILE_EFFICIENCY = {
    (64, 64, 1): 0.48, (64, 128, 1): 0.59, (64, 256, 1): 0.75,
    (128, 64, 1): 0.65, (128, 128, 1): 0.86, (128, 64, 2): 0.65, (128, 128, 2): 0.85, (128, 256, 2): 0.95,
}
"""Share of the bf16 rate that a block's k-tiles reach with 4 stages, by (rows, columns, consumer
warpgroups), fitted to the H200 (``experiments/wgmma_tma_tiles/``); other column counts are
interpolated (``tile_efficiency``)."""
STAGE_EFFICIENCY = {2: 0.6, 3: 0.85, 4: 1.0, 5: 0.97}
BLOCK_US = 1.5
"""A block's fixed cost, in microseconds."""
LATE_READ_US = 0.09
"""What each value of another buffer that a consumer thread's epilogue reads after the products
adds to its block (a trip to memory per few reads), fitted to TinyLlama's o-projection with its
residual and up-projection with its gate (``experiments/llama_products/``). Reads issued before
the products (``early_reads``) cost only their bytes."""
TMA_STORE_SAVING_US = 0.05
"""What a block saves, per pair of outputs a consumer thread holds, by putting them in a shared tile
that the TMA stores (``tma_stores``) instead of storing them from registers, as ``BLOCK_US`` counts
them; at most the whole of ``BLOCK_US``. Fitted to TinyLlama's gate at 512 rows
(``experiments/gemm_mainloop/``); only blocks of two consumer warpgroups take the tile."""
SLICE_SUMS_BYTES_PER_US = 30 * 1024
"""The pace at which a cluster's first block reads the other blocks' sums of their slices
(``cluster_slices``) through distributed shared memory: a guess of about L2's pace per SM (4 TB/s
over 132 SMs), not fitted; the slices run only where pinned (``setting.UNPINNED_CLUSTER_SLICES``)."""
SLICE_MEETING_US = 0.5
"""What the cluster's two meetings add to a block whose reduction is sliced: a guess, not fitted."""
LIGHT_LOAD_SPEEDUP = 1.7
"""How much faster an SM's k-tiles run when it is the only SM at work than when all are: the
speedup falls linearly to 1 as the busy SMs approach all of them. Fitted, with the memory's pace
below, to 60 settings of 128- and 512-row projections and an LM head timed on an H100
(``experiments/deep_rings/``), where a few dozen blocks ran their arithmetic about half as fast
again as the full chip's rate allows an SM."""
SM_COPY_BYTES_PER_US = 150 * 1024
"""The pace at which one SM takes its blocks' k-tiles from L2: what bounds a product of few blocks,
each of which copies many k-tiles, rather than the memory's. The timed settings ask for at least
120 KB/us; at 100 the model sent TinyLlama's down projection with its residual at 512 rows to a
slower setting than it keeps at 150 (``experiments/deep_rings/``)."""
BLOCKS_PER_SM = 32
REGISTERS_PER_SM = 65536
SHARED_BYTES_PER_SM = 228 * 1024


def tile_efficiency(block_m: int, block_n: int, groups: int) -> float:
    """``TILE_EFFICIENCY`` of the block, linear in the columns between the measured ones (and
    flat past the widest measured)."""
    known = sorted((n, e) for (m, n, g), e in TILE_EFFICIENCY.items() if (m, g) == (block_m, groups))
    if not known:
        raise KeyError(f"no measured efficiency of {block_m}-row blocks on {groups} consumer warpgroups")
    below = [p for p in known if p[0] <= block_n] or known[:1]
    above = [p for p in known if p[0] >= block_n] or known[-1:]
    (n0, e0), (n1, e1) = below[-1], above[0]
    return e0 if n1 == n0 else e0 + (e1 - e0) * (block_n - n0) / (n1 - n0)


def light_load_speedup(busy_sms: int, sm_count: int) -> float:
    """``LIGHT_LOAD_SPEEDUP`` where one SM works, falling linearly to 1 as the busy SMs approach all
    (a steeper fall fitted no better in the models: ``experiments/light_load/``). Largest where one
    SM works, which the split-K search's floor (``contraction.cost.floor_of_work_us``) takes."""
    return 1 + (LIGHT_LOAD_SPEEDUP - 1) * (1 - busy_sms / sm_count)


def useful_stages(stages: int, k_tiles: int) -> int:
    """The stages that hold a k-tile at some time: a ring deeper than the k-tiles only costs shared
    memory (the attention scores' products, whose 64-deep reduction is one k-tile, take two)."""
    return max(2, min(stages, k_tiles))


def resident(c: Contraction, choices: Choices, target: Target) -> int:
    """Blocks one SM holds at once, by threads, registers and shared memory."""
    threads = setting.threads(choices)
    registers = math.ceil(setting.registers(c, choices) / 8) * 8
    return max(1, min(BLOCKS_PER_SM, target.max_threads_per_sm // threads, REGISTERS_PER_SM // (registers * threads),
                      SHARED_BYTES_PER_SM // setting.shared_bytes(c, choices)))


def compute_and_memory_us(c: Contraction, choices: Choices, target: Target) -> tuple[float, float, int, int]:
    """The busiest SM's arithmetic, the memory traffic's time, the blocks and the blocks per SM."""
    batch = math.prod(c.extents[v] for v in c.batch)
    sliced = cluster_slices.slices(choices)
    blocks = (math.ceil(c.extents[c.m] / choices.block_m) * math.ceil(c.extents[c.n] / choices.block_n) * batch
              * sliced)
    per_sm = resident(c, choices, target)
    deepest = math.ceil(blocks / target.sm_count)
    k_tiles = cluster_slices.k_tiles_per_slice(c.reduce_extent, sliced)
    columns = setting.summed_columns(c, choices)
    efficiency = (tile_efficiency(choices.block_m, columns, choices.consumer_warpgroups)
                  * STAGE_EFFICIENCY[min(useful_stages(choices.stages, k_tiles), max(STAGE_EFFICIENCY))])
    sm_flops_per_us = (target.bf16_tensor_flops_per_us / target.sm_count * efficiency
                       * light_load_speedup(min(blocks, target.sm_count), target.sm_count))
    k_tile_us = 2 * choices.block_m * columns * choices.block_k / sm_flops_per_us
    late_reads = 0 if setting.early_read_registers(c, choices) else setting.epilogue_read_values(c, choices)
    stored_by_tma = setting.staged_copy(c, choices) == setting.TMA_COPY
    pairs = setting.accumulators(c, choices) * choices.block_n // columns // 2
    saved = min(BLOCK_US, TMA_STORE_SAVING_US * pairs) if stored_by_tma else 0
    block_us = BLOCK_US - saved + LATE_READ_US * late_reads
    if sliced > 1:  # the first block of each cluster reads the others' sums, while they wait
        block_us += SLICE_MEETING_US + (sliced - 1) * setting.slice_sums_bytes(c, choices) / SLICE_SUMS_BYTES_PER_US
    compute_us = deepest * k_tiles * k_tile_us + deepest * block_us / min(per_sm, deepest)
    written = sum(c.buffer_bytes(s.buffer) for s in c.epilogue)
    factors = ({o.load.buffer for o in c.operands} | ({c.paired.operand.load.buffer} if c.paired else set())
               | {p.column_operand.load.buffer for p in c.pieces})
    read_by_epilogue = {node.buffer for s in c.epilogue for node in ex.walk(s.value)
                        if isinstance(node, loop_ir.Load) and node.buffer not in factors}
    moved = sum(c.buffer_bytes(name) for name in factors | read_by_epilogue) + written
    stage_bytes = setting.stage_bytes(c, choices)
    memory_us = max(moved / target.memory_bytes_per_us, deepest * k_tiles * stage_bytes / SM_COPY_BYTES_PER_US)
    return compute_us, memory_us, blocks, per_sm

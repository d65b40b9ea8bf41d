"""``products = wgmma_tma``: a 16-bit contraction as a Hopper GEMM, the settings it takes and
why a setting cannot run.

A block computes a ``block_m`` x ``block_n`` tile (64 or 128 by 64 to 256 in steps of 16) over k-tiles 64
deep: one 128-byte swizzled row of a 16-bit type, the box the TMA copies per operand row.
``stages`` k-tiles of both operands are in shared memory at once, in a ring that a full
and an empty mbarrier guard per stage. One elected thread of a producer warpgroup issues the
TMA copies; ``consumer_warpgroups`` warpgroups (1 or 2) each multiply ``block_m / groups``
of the block's rows by all its columns, wgmma m64nNk16 per 64 rows and 16 k, N being the
block's columns. Each consumer thread holds ``block_m / (64 groups)`` x ``block_n / 2``
float32 accumulators, which the thread count and register file bound: a warpgroup's
threads may hold at most 128 (a 64 x 256 or a 128 x 128 slice), so 128 x 256 blocks take
two warpgroups.

In ``Choices`` terms the consumer threads are ``32 groups`` rows by 4 columns of threads:
a thread owns ``block_m / (32 groups)`` rows and ``block_n / 4`` columns (in runs of 2,
8 apart), as the wgmma's accumulators lie; the producer warpgroup comes on top.
"""

from __future__ import annotations

import itertools

import attrs

from lamina.core.ir import expr as ex, kernel_ir, loop_ir
from lamina.core.target import Target
from lamina.plugins.schedules.contraction import arrangement
from lamina.plugins.schedules.contraction.knobs import (
    CLUSTER_BLOCKS,
    CONSUMER_WARPGROUPS,
    GRID,
    MAX_STAGES,
    MIN_STAGES,
    PERSISTENT,
    TILE_SCHEDULERS,
    WGMMA_TMA,
    Choices,
    pins_text,
)
from lamina.plugins.schedules.contraction.layout import store_width
from lamina.plugins.schedules.contraction.recognise import Contraction
from lamina.plugins.schedules.contraction.wgmma_tma import cluster_slices, operands, staged_outputs, tma_stores
from lamina.plugins.schedules.contraction.wgmma_tma.epilogue import COLUMN_RUN

ARCH = 90
"""TMA and wgmma are Hopper's (sm_90a)."""
BLOCK_K = 64
"""A k-tile is one 128-byte swizzled row of a 16-bit type."""
BLOCK_MS = (64, 128)
BLOCK_NS = tuple(range(64, 257, 16))
"""The block's columns, the wgmma's N (a multiple of 8 up to 256): steps of 16 let a grid end
in a fuller last wave (TinyLlama's gate at 512 rows: 176 columns make 128 blocks on 132 SMs, where
192 make 120 of a larger tile; ``experiments/gemm_mainloop/``)."""
MEASURED_STEP = 32
"""The cost model weighs the columns between multiples of this only past ``WIDE_BLOCK_N`` and where the
TMA stores the block's outputs (``tma_stores``), as timed; a pin takes any of ``BLOCK_NS``."""
WIDE_BLOCK_N = 128
"""Below this many columns a width between multiples of ``MEASURED_STEP`` was slower than the next
multiple itself, though each block does less (BERT's up-projection at 512 rows in blocks of 112
columns against 128: ``experiments/tma_stores_by_warpgroups/``)."""
PRODUCER_THREADS = kernel_ir.WARPGROUP_SIZE
"""A warpgroup beside the consumer warpgroups, of which one thread issues the copies: a whole
warpgroup, because a block that runs wgmma runs whole warpgroups (the simulator insists), and
because handing the producer's registers to the consumers (``setmaxnreg``) works by warpgroup."""
MAX_ACCUMULATORS = 128
"""Float32 accumulators a consumer thread holds at most, leaving registers for addresses."""
OTHER_REGISTERS = 40
"""Registers a consumer thread needs besides its accumulators: addresses, the epilogue's values."""
REGISTERS_PER_BLOCK = 65536
EARLY_READ_REGISTER_LIMIT = 200
"""A block reads its epilogue's other buffers before the products (``early_reads``) only where
its accumulators, those reads and the rest fit in about this many registers a thread."""
FIXED_BY_TMA = ("block_k", "thread_m", "thread_n", "splits", "padding", "fragment_width", "warp_columns",
                "copy_steps", "buffers")
"""Knobs of the other products that this setting fixes (``buffers`` 1: the ring is ``stages``;
``warp_columns`` None: the warps are the wgmma's): pinning one without ``products`` keeps to the
others. ``grouped_rows``, the order of the blocks, it shares with them
(``arrangement.grouped``)."""
TMA_ONLY = ("stages", "consumer_warpgroups", "tile_scheduler", "cluster_blocks", "cluster_slices")


def pinned_by(knobs) -> bool:
    """Whether ``knobs`` (a rule's view of the contraction knobs) pin the TMA GEMM: ``products =
    wgmma_tma``, or one of its own knobs."""
    return knobs.get("products") == WGMMA_TMA or any(k in knobs for k in TMA_ONLY)
UNPINNED_SCHEDULERS = (GRID,)
"""The tile schedulers the cost model weighs: persistent blocks, timed against the grid on the
suite's bf16 linears, gained at most 2 % (``experiments/persistent_tiles/``), so they run only
where pinned."""
SEARCHED_STAGES = range(MIN_STAGES, 5 + 1)
"""The ring depths the cost model weighs; deeper rings (to ``MAX_STAGES``) run where pinned: timed on
an H100, they were no faster for the blocks the cost model chooses (``experiments/deep_rings/``)."""
UNPINNED_CLUSTERS = (1,)
"""The cluster sizes the cost model weighs: pairs of blocks sharing B, timed on an H100, were 3 to 16 %
slower than blocks alone on TinyLlama's and Qwen's products at 512 rows, LM heads included (4 % faster
on TinyLlama's LM head on persistent blocks; ``experiments/gemm_clusters/``), so they run only where
pinned."""
UNPINNED_CLUSTER_SLICES = (1,)
"""The slices of the reduction summed in a cluster (``cluster_slices``) that the cost model weighs:
timed on an H100 against the cost model's choice (the split-K rule's two kernels, or one block per
tile), they were faster on Qwen2.5's o and down projections at 128 rows (1.27x, 1.10x) and slower
on the seven other products, by up to 1.5x at 512 rows (``experiments/gemm_cluster_slices/``), so
they run only where pinned."""
MIN_UNPINNED_ROWS = kernel_ir.WGMMA_M
"""Products of fewer rows (decoding's M = 1, and skinny ones up to 63) are offered this setting only
where it is pinned: a wgmma computes 64 rows whatever M is, so such a product is all copying of
B, which the CUDA cores' settings, split across blocks (split-K) where SMs would idle, already
do at the memory's pace; the cost model's FMA estimates of those shapes are pessimistic, and
without this rule it would trade them for 64 times the arithmetic."""



def uses(choices: Choices) -> bool:
    return choices.products == WGMMA_TMA


def batch_rows(c: Contraction, choices: Choices) -> int:
    """The batch entries whose block rows the grid's blocks run down as one column of rows
    (``arrangement.batch_as_rows``); persistent blocks, clusters and sliced reductions number their
    tiles with the batch outermost."""
    if (choices.tile_scheduler == PERSISTENT or (choices.cluster_blocks or 1) > 1
            or cluster_slices.slices(choices) > 1):
        return 1
    return arrangement.batch_as_rows(c)


def choices_for(block_m: int, block_n: int, stages: int, groups: int, scheduler: str = GRID,
                cluster_blocks: int = 1, cluster_slices: int = 1) -> Choices:
    """The setting of a block of ``block_m`` x ``block_n`` with ``stages`` and ``groups`` consumer warpgroups,
    given its tiles by ``scheduler``, in clusters of ``cluster_blocks``, the reduction in ``cluster_slices``."""
    thread_m = max(1, block_m // (kernel_ir.WARP_SIZE * groups))
    return Choices(block_m, block_n, BLOCK_K, thread_m, block_n // 4, 1, 1, 0, 1, None, None, 0, WGMMA_TMA,
                   stages, groups, scheduler, cluster_blocks, cluster_slices)


def settings(c: Contraction, pinned: dict, target: Target):
    """Every block shape, stage count and number of consumer warpgroups that the pins allow:
    wherever ``products = wgmma_tma`` or one of its own knobs is pinned, and on Hopper for 16-bit
    products where no knob of the other products is (``problem`` drops those that cannot run; a
    float32 product is not offered them, so that its errors do not list theirs)."""
    if "products" in pinned:
        if pinned["products"] != WGMMA_TMA:
            return
    elif not any(k in pinned for k in TMA_ONLY):
        if (target.compute_capability != ARCH or any(k in pinned for k in FIXED_BY_TMA)
                or c.hinted().extents[c.m] < MIN_UNPINNED_ROWS or operands.factors(c) is None):
            return

    def values(key, default):
        return [pinned[key]] if key in pinned else default

    for block_m, block_n, stages, groups, scheduler, cluster, sliced in itertools.product(
            values("block_m", BLOCK_MS), values("block_n", BLOCK_NS),
            values("stages", SEARCHED_STAGES), values("consumer_warpgroups", CONSUMER_WARPGROUPS),
            values("tile_scheduler", UNPINNED_SCHEDULERS), values("cluster_blocks", UNPINNED_CLUSTERS),
            values("cluster_slices", UNPINNED_CLUSTER_SLICES)):
        choices = choices_for(block_m, block_n, stages, groups, scheduler, cluster, sliced)
        if pinned:
            choices = attrs.evolve(choices, **pinned)
        if block_n % MEASURED_STEP and "block_n" not in pinned \
                and (block_n < WIDE_BLOCK_N or staged_copy(c, choices) != TMA_COPY):
            continue
        yield choices


def summed_columns(c: Contraction, choices: Choices) -> int:
    """The columns a block sums, the wgmma's N: its outputs', twice over where the kernel sums a gate
    and its up projection side by side (``Contraction.paired``)."""
    return choices.block_n * (2 if c.paired is not None else 1)


def accumulators(c: Contraction, choices: Choices) -> int:
    """Float32 accumulators of one consumer thread."""
    return choices.block_m // (kernel_ir.WGMMA_M * choices.consumer_warpgroups) * summed_columns(c, choices) // 2


def registers(c: Contraction, choices: Choices) -> int:
    return accumulators(c, choices) + early_read_registers(c, choices) + OTHER_REGISTERS


def epilogue_read_values(c: Contraction, choices: Choices) -> int:
    """The values of other buffers that a consumer thread's epilogue reads at its outputs' rows (a
    residual, a gate; not a bias, the same for every row and soon in cache): of each distinct such
    read, one per row of the thread, times one per column if its index moves with the column."""
    rows = choices.block_m // (kernel_ir.WGMMA_M * choices.consumer_warpgroups) * 2
    columns = choices.block_n // 4  # four threads across a row
    return sum(rows * (columns if by_column else 1) for by_row, by_column in _facts(c).epilogue_reads if by_row)


def early_read_registers(c: Contraction, choices: Choices) -> int:
    """Registers of the epilogue's reads that the block issues before the products (``early_reads``):
    all of them where they fit (``EARLY_READ_REGISTER_LIMIT``, and the block's registers) and the
    epilogue computes each pair of a thread's outputs as one (stored together or through the shared
    tile), else none; none where the reduction is sliced in a cluster, whose first block alone runs the
    epilogue, after the others' sums."""
    values = epilogue_read_values(c, choices)
    if not values or c.pieces or not (_facts(c).stores_pairs or _stages_odd_rows(c, choices)) \
            or cluster_slices.slices(choices) > 1:  # only the cluster's first block runs the epilogue
        return 0
    total = accumulators(c, choices) + values + OTHER_REGISTERS
    fits = total <= EARLY_READ_REGISTER_LIMIT and total * threads(choices) <= REGISTERS_PER_BLOCK
    return values if fits else 0


def threads(choices: Choices) -> int:
    """The consumer warpgroups and the producer warpgroup."""
    return choices.consumer_warpgroups * kernel_ir.WARPGROUP_SIZE + PRODUCER_THREADS


def barrier_bytes(stages: int) -> int:
    return 2 * stages * kernel_ir.hopper_barriers.MBARRIER_BYTES


def shared_bytes(c: Contraction, choices: Choices) -> int:
    """The ring's stages of both operands' k-tiles, a full and an empty mbarrier per stage, the
    outputs' tile where they go through shared memory (``staged_copy``), and the sums a block leaves
    for its cluster's first where the reduction is sliced (``cluster_slices``)."""
    return _ring_bytes(c, choices) + staged_tile_bytes(c, choices) + slice_sums_bytes(c, choices)


def slice_sums_bytes(c: Contraction, choices: Choices) -> int:
    return cluster_slices.sums_bytes(accumulators(c, choices), choices.consumer_warpgroups * kernel_ir.WARPGROUP_SIZE,
                                     cluster_slices.slices(choices))


def stage_bytes(c: Contraction, choices: Choices) -> int:
    """One stage of the ring: a k-tile of each operand."""
    return (choices.block_m + summed_columns(c, choices)) * BLOCK_K * _facts(c).operand_itemsize


def _ring_bytes(c: Contraction, choices: Choices) -> int:
    return choices.stages * stage_bytes(c, choices) + barrier_bytes(choices.stages)


def staged_tile_bytes(c: Contraction, choices: Choices) -> int:
    """The shared tile of the block's outputs (``staged_copy``), or 0."""
    copy = staged_copy(c, choices)
    if copy == THREADS_COPY:
        return staged_outputs.tile_bytes(c, choices.block_m, choices.block_n)
    if copy == TMA_COPY:
        return tma_stores.tile_bytes(choices.block_m, choices.block_n, _facts(c).tma_output[1])
    return 0


@attrs.frozen
class _KernelFacts:
    """What this setting asks of a contraction's kernel whatever the setting: the same for every
    setting the cost model weighs, so worked out once per kernel (a contraction is what
    ``analyse`` finds in its kernel)."""

    operands_problem: str | None
    b_layout: str
    odd_rows: bool
    stores_pairs: bool
    """Whether a thread stores its two adjacent outputs as one access (``layout.store_width``)."""
    epilogue_reads: tuple[tuple[bool, bool], ...]
    """Each distinct read of another buffer in the epilogue: whether its index moves with the row,
    and with the column."""
    tma_output: tuple[int, int] | None
    """The output's row stride and element size where the TMA can store it (``tma_stores``)."""
    operand_itemsize: int
    """The bytes of an operand's element (2 where the product is of no 16-bit factors)."""


def _facts(c: Contraction) -> _KernelFacts:
    if c.kernel not in _known:
        if len(_known) >= 1024:
            _known.clear()
        factors = operands.factors(c)
        found = operands.view(c, factors[1]) if factors else "no factors"
        layout = kernel_ir.K_MAJOR if isinstance(found, str) else found.layout
        itemsize = factors[0].load.dtype.itemsize if factors else 2
        if c.pieces:  # each piece stores its own outputs from registers
            _known[c.kernel] = _KernelFacts(_find_operands_problem(c), layout, False,
                                            all(store_width(p.contraction, COLUMN_RUN) > 1 for p in c.pieces),
                                            _epilogue_reads(c), None, itemsize)
        else:
            _known[c.kernel] = _KernelFacts(_find_operands_problem(c), layout, staged_outputs.odd_rows(c),
                                            store_width(c, COLUMN_RUN) > 1, _epilogue_reads(c),
                                            tma_stores.output_rows(c), itemsize)
    return _known[c.kernel]


_known: dict[loop_ir.Kernel, _KernelFacts] = {}


def operands_problem(c: Contraction) -> str | None:
    """Why the TMA cannot read the contraction's operands, or None."""
    return _facts(c).operands_problem


def b_layout(c: Contraction) -> str:
    """How the TMA GEMM reads the columns' operand B: ``k_major`` or ``n_major`` (``operands.view``)."""
    return _facts(c).b_layout


THREADS_COPY, TMA_COPY = "threads", "tma"
"""Who writes a block's shared tile of outputs out: the whole block, a row at a time
(``staged_outputs``), or the TMA (``tma_stores``)."""
SHARED_BYTES_PER_BLOCK = 227 * 1024
"""What a Hopper block may opt in to: a tile of outputs for the TMA is taken only where it fits
beside the ring."""


def staged_copy(c: Contraction, choices: Choices) -> str:
    """How the block's outputs reach memory through a shared tile: ``THREADS_COPY`` where the
    output's rows do not let a thread store aligned pairs, ``TMA_COPY`` where the TMA can store the
    output and the tile fits beside the ring, else ``""`` (stored from registers). Only the grid's
    blocks do either: the whole block meets before the tile goes out, and a persistent block's
    producer has run ahead into its next tile. A block that holds its epilogue's reads in registers
    through the products (``early_reads``) stores from registers: with the tile's stores as well,
    ptxas serialises its wgmma (its warning C7514; ``experiments/gemm_mainloop/``). Only blocks of
    two consumer warpgroups take the TMA's tile: it paid on every such block timed, and on blocks of
    one it paid on some products and lost on others (``experiments/tma_stores_by_warpgroups/``)."""
    if c.pieces:  # each block runs the epilogue of its piece, storing from registers
        return ""
    if _stages_odd_rows(c, choices):
        return THREADS_COPY
    facts = _facts(c)
    if (choices.tile_scheduler or GRID) != GRID or early_read_registers(c, choices) or facts.tma_output is None \
            or choices.consumer_warpgroups < 2 or tma_stores.layout(facts.tma_output[1], choices.block_n) is None:
        return ""
    tile = tma_stores.tile_bytes(choices.block_m, choices.block_n, facts.tma_output[1])
    beside = _ring_bytes(c, choices) + slice_sums_bytes(c, choices)
    return TMA_COPY if beside + tile <= SHARED_BYTES_PER_BLOCK else ""


def _stages_odd_rows(c: Contraction, choices: Choices) -> bool:
    return (choices.tile_scheduler or GRID) == GRID and _facts(c).odd_rows


def _epilogue_reads(c: Contraction) -> tuple[tuple[bool, bool], ...]:
    inputs = {b.name for b in c.kernel.inputs}
    reads = {node for store in c.epilogue for node in ex.walk(store.value)
             if isinstance(node, loop_ir.Load) and node.buffer in inputs}
    found = []
    for read in reads:
        names = set().union(*(ex.free_vars(i) for i in read.index)) if read.index else set()
        found.append((c.m in names, c.n in names))
    return tuple(sorted(found))


def _find_operands_problem(c: Contraction) -> str | None:
    factors = operands.factors(c)
    if factors is None:
        return ("products = wgmma_tma needs a float32 sum of products of two bf16 or two fp16 operands, one along "
                "the rows and one along the columns")
    if c.paired is not None:
        paired = operands.view(c, c.paired.operand)
        if isinstance(paired, str) or paired.layout != kernel_ir.K_MAJOR:
            return (f"products = wgmma_tma sums a gate and its up projection side by side only where the TMA reads "
                    f"both weights K-major: {paired if isinstance(paired, str) else 'the second lies along n'}")
    for piece in c.pieces:
        column = operands.view(piece.contraction, piece.column_operand)
        if isinstance(column, str) or column.layout != kernel_ir.K_MAJOR:
            return (f"products = wgmma_tma runs products of one input side by side only where the TMA reads each "
                    f"weight K-major: {column if isinstance(column, str) else 'one lies along n'}")
    for operand in factors:
        found = operands.view(c, operand)
        if isinstance(found, str):
            return f"products = wgmma_tma: {found}"
        if found.batch_columns and (c.reduce_extent % BLOCK_K or any(s % BLOCK_K for s in found.batch_columns.values())):
            return (f"products = wgmma_tma takes split-K slices of whole {BLOCK_K}-deep k-tiles (a k-tile would "
                    f"read into the next slice), not {c.reduce_extent}")
    return None


def problem(c: Contraction, choices: Choices, target: Target) -> str | None:
    """Why ``choices`` (``products = wgmma_tma``) cannot run the contraction on ``target``, or None."""
    if target.compute_capability != ARCH:
        return f"products = wgmma_tma needs Hopper's TMA and wgmma (sm_90); {target.name} is {target.arch}"
    unreadable = operands_problem(c)
    if unreadable is not None:
        return unreadable
    expected = choices_for(choices.block_m, choices.block_n, choices.stages or MIN_STAGES,
                           choices.consumer_warpgroups or 1)
    differing = [name for name in FIXED_BY_TMA if getattr(choices, name) != getattr(expected, name)]
    if differing:
        wanted = pins_text({name: getattr(expected, name) for name in differing}, " = ")
        return f"products = wgmma_tma in {choices.block_m}x{choices.block_n} blocks takes {wanted}"
    if choices.block_m not in BLOCK_MS or choices.block_n not in BLOCK_NS:
        return (f"products = wgmma_tma takes blocks of {' or '.join(map(str, BLOCK_MS))} rows by "
                f"{', '.join(map(str, BLOCK_NS))} columns, not {choices.block_m}x{choices.block_n}")
    if choices.block_n % kernel_ir.SWIZZLE_PANEL and b_layout(c) == kernel_ir.N_MAJOR:
        return (f"products = wgmma_tma reads B along n (N-major) in panels of {kernel_ir.SWIZZLE_PANEL} columns: "
                f"it takes blocks of {', '.join(str(n) for n in BLOCK_NS if n % kernel_ir.SWIZZLE_PANEL == 0)} "
                f"columns, not {choices.block_n}")
    if choices.stages is None or not MIN_STAGES <= choices.stages <= MAX_STAGES:
        return f"products = wgmma_tma takes {MIN_STAGES} to {MAX_STAGES} stages"
    if choices.consumer_warpgroups not in CONSUMER_WARPGROUPS:
        return "products = wgmma_tma takes 1 or 2 consumer warpgroups"
    if choices.tile_scheduler not in TILE_SCHEDULERS:
        return f"products = wgmma_tma takes tile_scheduler = {' or '.join(TILE_SCHEDULERS)}"
    if choices.tile_scheduler == PERSISTENT and c.slice_bound is not None:
        return ("tile_scheduler = persistent walks tiles of the whole reduction; this kernel sums a split-K slice "
                "(pin split_k = 1, or the grid)")
    clustered = cluster_problem(c, choices) or cluster_slices.problem(c, choices)
    if clustered is not None:
        return clustered
    if choices.block_m % (kernel_ir.WGMMA_M * choices.consumer_warpgroups):
        return (f"{choices.consumer_warpgroups} consumer warpgroups of 64-row wgmma do not share "
                f"{choices.block_m} rows")
    if c.paired is not None and summed_columns(c, choices) > max(BLOCK_NS):
        return (f"a block that sums a gate and its up projection side by side takes at most {max(BLOCK_NS) // 2} "
                f"columns (a wgmma of twice as many), not {choices.block_n}")
    if c.paired is not None and choices.tile_scheduler == PERSISTENT:
        return "a block that sums a gate and its up projection side by side takes tile_scheduler = grid"
    pieces = pieces_problem(c, choices)
    if pieces is not None:
        return pieces
    if accumulators(c, choices) > MAX_ACCUMULATORS:
        return (f"a {choices.block_m}x{choices.block_n} block on {choices.consumer_warpgroups} consumer "
                f"warpgroup{'s' if choices.consumer_warpgroups > 1 else ''} holds {accumulators(c, choices)} "
                f"accumulators per thread; at most {MAX_ACCUMULATORS} fit beside the rest")
    if registers(c, choices) * threads(choices) > target.registers_per_block:
        return f"about {registers(c, choices)} registers for each of {threads(choices)} threads exceed the block's"
    shared = shared_bytes(c, choices)
    if shared > target.max_shared_bytes_optin:
        return (f"{choices.stages} stages of {choices.block_m}x{choices.block_n} blocks take {shared} B of shared "
                f"memory, more than the {target.max_shared_bytes_optin} B {target.name} allows per block")
    return None


def pieces_problem(c: Contraction, choices: Choices) -> str | None:
    """Why a kernel of products side by side (``Contraction.pieces``) cannot run ``choices``, or None:
    each block's columns must lie in one product, and the grid's blocks each take one tile."""
    if not c.pieces:
        return None
    uneven = [p.columns for p in c.pieces if p.columns % choices.block_n]
    if uneven:
        return (f"a block of products side by side takes its columns from one of them: {choices.block_n} columns "
                f"do not divide {uneven[0]}")
    if choices.tile_scheduler == PERSISTENT or (choices.cluster_blocks or 1) > 1 \
            or cluster_slices.slices(choices) > 1:
        return "products side by side take tile_scheduler = grid, cluster_blocks = 1 and cluster_slices = 1"
    return None


def cluster_problem(c: Contraction, choices: Choices) -> str | None:
    """Why blocks cannot pair up in clusters of ``choices.cluster_blocks`` sharing B, or None: the pairs
    are adjacent block rows, so the grid must have an even number of them, known when compiling; and
    each block copies half of B's k-tile (or, summing a gate and its up projection, one of the two
    weights), K-major."""
    cluster = choices.cluster_blocks or 1
    if cluster not in CLUSTER_BLOCKS:
        return f"products = wgmma_tma takes cluster_blocks = {' or '.join(map(str, CLUSTER_BLOCKS))}"
    if cluster == 1:
        return None
    # the cost model weighs sizes counted at run time at their hints: the kernel's own loop says whether
    # the rows are known when compiling
    rows = next(s.extent for s in loop_ir.statements(c.kernel.body) if isinstance(s, loop_ir.Loop) and s.var == c.m)
    if not isinstance(rows, int) or -(-rows // choices.block_m) % cluster:
        return (f"cluster_blocks = {cluster} pairs adjacent block rows: {rows} rows in blocks of {choices.block_m} "
                "must make an even number of block rows, known when compiling")
    if b_layout(c) != kernel_ir.K_MAJOR:
        return f"cluster_blocks = {cluster} shares B's k-tiles as K-major boxes; this B lies along n"
    return None

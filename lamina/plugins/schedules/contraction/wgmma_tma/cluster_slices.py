"""The Hopper GEMM's reduction cut into slices that the blocks of one cluster sum (``cluster_slices``).

A product of few output tiles (128 rows by 2 048 to 4 608 columns, a prompt of 128 tokens) leaves
most SMs idle with one block per tile. The split-K rule (``split_k``) cuts the reduction into
slices in Loop IR, each slice's partial sums written to memory and added by a second kernel: a
launch and a pass over the partial sums (``experiments/linears_at_128_rows/``). Here the slices stay in one kernel: the ``S`` blocks of a
tile's slices run as one cluster (adjacent blocks along x, block ``r`` summing the k-tiles of slice
``r``), and once their products are done the blocks other than the first put their float32
accumulators in their own shared memory, each thread's values where that thread of the first
block finds them (value ``v`` of thread ``t`` at ``[v][t]``, no bank conflicts); the cluster meets;
the first block's consumer threads add the others' values, read through distributed shared memory
(``ClusterLoad``), to their own and run the epilogue as a block of the whole reduction does; the
cluster meets again so that no block ends while the first still reads its shared memory::

    ... each block's products over its slice's k-tiles
    if rank != 0:  sums[v][tid] = acc[v]  for each of the thread's accumulators
    cluster barrier
    if rank == 0 and tid < consumers:  acc[v] += sums[v][tid] of block 1, 2, ...;  the epilogue
    cluster barrier

No counters and no scratch memory: nothing to zero before each launch, where the last block of a
tile's slices to finish would need a counter per tile that a kernel launch of its own zeroes.
"""

from __future__ import annotations

import math

from lamina.core.ir import dtypes, expr as ex, kernel_ir
from lamina.core.ir.expr import Expr
from lamina.plugins.schedules.contraction.knobs import CLUSTER_SLICES, GRID, Choices
from lamina.plugins.schedules.contraction.recognise import Contraction

BLOCK_K = 64
"""The GEMM's k-tile (``setting.BLOCK_K``)."""


def slices(choices: Choices) -> int:
    return choices.cluster_slices or 1


def k_tiles_per_slice(reduce_extent: int, count: int) -> int:
    """The k-tiles each block sums: the reduction's in ``count`` slices as equal as whole k-tiles
    make them, the last slice the shortest."""
    return math.ceil(math.ceil(reduce_extent / BLOCK_K) / count)


def sums_bytes(accumulators: int, consumer_threads: int, count: int) -> int:
    """The shared array in which a block other than its cluster's first leaves its sums: every
    accumulator of every consumer thread, float32; none without slices."""
    return accumulators * consumer_threads * 4 if count > 1 else 0


def problem(c: Contraction, choices: Choices) -> str | None:
    """Why the reduction cannot be cut into ``choices.cluster_slices`` slices summed in a cluster,
    or None."""
    count = slices(choices)
    if count not in CLUSTER_SLICES:
        return f"products = wgmma_tma takes cluster_slices = {', '.join(map(str, CLUSTER_SLICES))}"
    if count == 1:
        return None
    if (choices.tile_scheduler or GRID) != GRID:
        return f"cluster_slices = {count} runs a block per slice of each tile: it takes tile_scheduler = grid"
    if (choices.cluster_blocks or 1) > 1:
        return f"cluster_slices = {count} and cluster_blocks = {choices.cluster_blocks} both make clusters: pin one"
    if c.slice_bound is not None:
        return (f"cluster_slices = {count}: this kernel already sums one split-K slice of the reduction "
                "(pin split_k = 1 to slice it in clusters instead)")
    k_tiles = math.ceil(c.reduce_extent / BLOCK_K)
    if (count - 1) * k_tiles_per_slice(c.reduce_extent, count) >= k_tiles:
        return (f"cluster_slices = {count}: the reduction of {c.reduce_extent} is {k_tiles} k-tiles of {BLOCK_K}, "
                f"too few for {count} slices of whole k-tiles that are none of them empty")
    return None


def line(reduce_extent: int, count: int) -> str:
    """The Tile IR's account of the slices."""
    per = k_tiles_per_slice(reduce_extent, count)
    return (f"  the reduction in {count} slices of {per} k-tiles, one per block of a cluster of {count}: the blocks "
            "other than the first put their float32 sums in shared memory, and the first adds them to its own "
            "through distributed shared memory and runs the epilogue")


class SlicesInCluster:
    """The statements that sum a tile's slices across its cluster, for a block of ``consumers``
    consumer threads whose accumulators are ``acc[q][p]``, ``rows`` x ``columns`` of them."""

    def __init__(self, count: int, acc: str, rows: int, columns: int, consumers: int, tid: Expr, name: str):
        self.count, self.acc, self.rows, self.columns, self.consumers, self.tid = (
            count, acc, rows, columns, consumers, tid)
        self.name = name
        self.rank = kernel_ir.block_idx("x") % count
        """The block's slice, its rank in the cluster."""

    def _accumulators(self):
        return [(q, p) for q in range(self.rows) for p in range(self.columns)]

    def array(self) -> kernel_ir.Array:
        return kernel_ir.Array(self.name, dtypes.float32, (self.rows * self.columns, self.consumers), "shared")

    def put_sums(self) -> list[kernel_ir.Stmt]:
        """A consumer thread of a block other than the first leaves its accumulators for the first."""
        stores = [kernel_ir.Store(self.name, (ex.const(q * self.columns + p), self.tid),
                                  kernel_ir.Load(self.acc, (ex.const(q), ex.const(p)), dtypes.float32))
                  for q, p in self._accumulators()]
        return [kernel_ir.If(ex.op("ne", self.rank, 0), stores)]

    def add_others(self) -> list[kernel_ir.Stmt]:
        """A consumer thread of the first block adds the other blocks' sums to its own, block by block."""
        out = []
        for rank in range(1, self.count):
            for q, p in self._accumulators():
                mine = kernel_ir.Load(self.acc, (ex.const(q), ex.const(p)), dtypes.float32)
                theirs = kernel_ir.ClusterLoad(self.name, (ex.const(q * self.columns + p), self.tid), ex.const(rank),
                                               dtypes.float32)
                out.append(kernel_ir.Store(self.acc, (ex.const(q), ex.const(p)), ex.op("add", mine, theirs)))
        return out

    def first_only(self, body: list[kernel_ir.Stmt]) -> list[kernel_ir.Stmt]:
        return [kernel_ir.If(ex.op("eq", self.rank, 0), body)]

"""Clusters of blocks that share TMA copies and arrive on each other's mbarriers, in the simulator:
a multicast copy lands in every block it names and completes on each one's own barrier, an
arrival may go to another block's barrier, and the faults of kernels that misuse them."""

from __future__ import annotations

import pytest
import torch

from lamina.backends.reference.simulator import simulate
from lamina.core.ir import dtypes, kernel_ir as kir
from lamina.core.ir.expr import Var, const, op
from tests.backends.tma_box_kernels import expected_box

BF16 = dtypes.bfloat16
THREADS = 128
BLOCKS, CLUSTER = 4, 2
ROWS, COLUMNS = 16, 64
"""Each cluster's tile of the tensor; each block copies half its rows for both blocks."""
HALF = ROWS // 2
TILE = ROWS * COLUMNS
TX, BX = kir.thread_idx("x"), kir.block_idx("x")


def multicast_tiles(rows: int = 2 * ROWS, columns: int = COLUMNS, *, arrive_first: bool = True,
                    peer_waits: bool = True, after_init: str = "cluster", final_barrier: bool = True,
                    second_copy: bool = False, peer_releases: bool = True, peer_wgmma: bool = False) -> kir.Kernel:
    """Cluster ``c`` copies rows ``16 c ..`` of an (``rows`` x ``columns``) tensor into the ``tile`` of
    both its blocks, each block copying half the rows for both, and every block stores its tile to
    ``out[block]``; then both blocks release the tile on the ``empty`` barrier of rank 0.

    ``arrive_first`` False issues each copy before its block's arrive that expects the bytes;
    ``peer_waits`` False has rank 1 read its tile without waiting; ``after_init`` "block" puts a
    block's Barrier after the inits instead of a ClusterBarrier; ``final_barrier`` False drops the
    ClusterBarrier at the end. ``second_copy`` has rank 0, once released, copy the first half again
    into rank 1 alone; ``peer_releases`` False drops rank 1's release; ``peer_wgmma`` has rank 1
    read the tile with a wgmma before its release, and wait for it only after the second copy."""
    tid, rank, cluster, e, i = Var("tid"), Var("rank"), Var("cluster"), Var("e"), Var("i")
    arrive = kir.MbarrierArrive("full", (const(0),), TILE * BF16.itemsize)
    load = kir.TmaLoad("tile", (rank * HALF, const(0)), "map", cluster * ROWS + rank * HALF, const(0), "full",
                       (const(0),), multicast=(0, 1))
    wait = kir.MbarrierWait("full", (const(0),), const(0))
    release = kir.MbarrierArrive("empty", (const(0),), rank=const(0))
    body = [
        kir.Declare("tid", dtypes.index, TX),
        kir.Declare("rank", dtypes.index, BX % CLUSTER),
        kir.Declare("cluster", dtypes.index, BX // CLUSTER),
        kir.If(op("eq", tid, 0), [kir.MbarrierInit("full", (const(0),), 1),
                                  kir.MbarrierInit("empty", (const(0),), CLUSTER if peer_releases else 1)]),
        kir.ClusterBarrier() if after_init == "cluster" else kir.Barrier(),
        kir.If(op("eq", tid, 0), [arrive, load] if arrive_first else [load, arrive]),
        wait if peer_waits else kir.If(op("eq", rank, 0), [wait]),
        kir.For("i", const(0), const(TILE // THREADS), 1, [
            kir.Declare("e", dtypes.index, tid + i * THREADS),
            kir.Store("out", (BX * TILE + e,), kir.Load("tile", (e // COLUMNS, e % COLUMNS), BF16))]),
        *([kir.If(op("eq", rank, 1), _peer_wgmma())] if peer_wgmma else []),
        kir.If(op("eq", tid, 0), [release] if peer_releases else [kir.If(op("eq", rank, 0), [release])]),
        kir.If(op("eq", rank, 0), [kir.MbarrierWait("empty", (const(0),), const(0))]),
    ]
    if second_copy or peer_wgmma:
        again = kir.TmaLoad("tile", (const(0), const(0)), "map", cluster * ROWS, const(0), "full", (const(0),),
                            multicast=(1,))
        body += [
            kir.If(op("eq", tid, 0), [
                kir.If(op("eq", rank, 1), [kir.MbarrierArrive("full", (const(0),), HALF * COLUMNS * BF16.itemsize)]),
                kir.If(op("eq", rank, 0), [again])]),
            kir.If(op("eq", rank, 1), [kir.MbarrierWait("full", (const(0),), const(1)),
                                       *([kir.WgmmaWait(0)] if peer_wgmma else [])]),
        ]
    body += [kir.ClusterBarrier()] if final_barrier else []
    return kir.Kernel(
        "multicast_tiles",
        [kir.Param("x", BF16, rows * columns), kir.Param("out", BF16, BLOCKS * TILE, writable=True)],
        [kir.Array("tile", BF16, (ROWS, COLUMNS), "shared", swizzle=128),
         kir.Array("full", dtypes.int64, (1,), "shared"), kir.Array("empty", dtypes.int64, (1,), "shared"),
         *([kir.Array("acc", dtypes.float32, (8,), "register"), kir.Array("a_words", dtypes.int32, (4,), "register")]
           if peer_wgmma else [])],
        body,
        kir.Launch((BLOCKS, 1, 1), (THREADS, 1, 1), cluster=(CLUSTER, 1, 1)),
        tensor_maps=[kir.TensorMap("map", "x", (rows, columns), columns, (HALF, COLUMNS), 128)],
    )


def _peer_wgmma() -> list:
    """A wgmma of rank 1's warpgroup that reads the first 16 columns of its tile."""
    wgmma = kir.Wgmma("acc", [(const(p),) for p in range(8)],
                      [kir.Load("a_words", (const(v),), dtypes.int32) for v in range(4)], (), "tile",
                      (const(0), const(0)), 16, False, a_from="registers", operand_dtype=BF16)
    return [*[kir.Store("a_words", (const(v),), const(0x3F803F80 + v, dtypes.int32)) for v in range(4)],
            kir.WgmmaFence(), wgmma, kir.WgmmaCommit()]


def remote_arrival(target=const(0), *, after_init: str = "cluster", waits: bool = True,
                   final_barrier: bool = True) -> kir.Kernel:
    """Rank 0 of each cluster waits on its ``ready`` barrier (one arrival) while rank 1 arrives on it
    from afar (on rank ``target``'s); every thread then stores twice its ``x``.

    ``after_init`` "block" puts a Barrier after the init instead of a ClusterBarrier; ``waits``
    False drops rank 0's wait; ``final_barrier`` False the ClusterBarrier at the end."""
    tid, rank = Var("tid"), Var("rank")
    wait = [kir.MbarrierWait("ready", (const(0),), const(0))] if waits else [kir.Comment("no wait")]
    threads = 32
    return kir.Kernel(
        "remote_arrival",
        [kir.Param("x", dtypes.float32, BLOCKS * threads), kir.Param("out", dtypes.float32, BLOCKS * threads,
                                                                      writable=True)],
        [kir.Array("ready", dtypes.int64, (1,), "shared")],
        [
            kir.Declare("tid", dtypes.index, TX),
            kir.Declare("rank", dtypes.index, BX % CLUSTER),
            kir.If(op("eq", tid, 0), [kir.MbarrierInit("ready", (const(0),), 1)]),
            kir.ClusterBarrier() if after_init == "cluster" else kir.Barrier(),
            kir.If(op("eq", rank, 0), wait, [
                kir.If(op("eq", tid, 0), [kir.MbarrierArrive("ready", (const(0),), rank=target)])]),
            kir.Store("out", (BX * threads + tid,), op("mul", kir.Load("x", (BX * threads + tid,), dtypes.float32),
                                                       const(2.0, dtypes.float32))),
            *([kir.ClusterBarrier()] if final_barrier else []),
        ],
        kir.Launch((BLOCKS, 1, 1), (threads, 1, 1), cluster=(CLUSTER, 1, 1)),
    )


def run_tiles(kernel: kir.Kernel, rows: int = 2 * ROWS, columns: int = COLUMNS):
    x = (torch.rand(rows * columns) + 1).bfloat16()  # never zero, unlike the zeros past the edges
    arrays = {"x": x, "out": torch.full((BLOCKS * TILE,), float("nan")).bfloat16()}
    report = simulate(kernel, arrays, raise_on_fault=False)
    return x, arrays["out"].view(BLOCKS, TILE), report


def run_arrival(kernel: kir.Kernel):
    x = torch.rand(BLOCKS * 32) + 1
    arrays = {"x": x, "out": torch.full_like(x, float("nan"))}
    report = simulate(kernel, arrays, raise_on_fault=False)
    return x, arrays["out"], report


# --- multicast copies ---------------------------------------------------------


@pytest.mark.parametrize("arrive_first", [True, False])
@pytest.mark.parametrize("rows, columns", [(2 * ROWS, COLUMNS), (2 * ROWS - 5, 56)])
def test_each_block_receives_both_halves_of_its_cluster_tile(rows, columns, arrive_first):
    """Copies issued before the arrive that expects them take the barrier's bytes below zero for a while."""
    kernel = multicast_tiles(rows, columns, arrive_first=arrive_first)
    kir.verify_kernel(kernel)
    x, out, report = run_tiles(kernel, rows, columns)
    assert report.faults == []
    for block in range(BLOCKS):
        cluster = block // CLUSTER
        expected = expected_box(x, rows, columns, (ROWS, COLUMNS), cluster * ROWS, 0)
        assert torch.equal(out[block], expected)
    assert (out == 0).any() == (rows < 2 * ROWS or columns < COLUMNS)


def test_a_peer_reading_a_multicast_tile_before_its_wait_is_a_race():
    _, _, report = run_tiles(multicast_tiles(peer_waits=False))
    assert report.faults == report.races
    assert report.races[0].startswith(
        "kernel multicast_tiles: read of tile[0][0] in block (1, 0, 0) by block (1, 0, 0) thread (0, 0, 0), which a "
        "TMA copy wrote completing phase 0 of mbarrier full[0] of block (1, 0, 0), before the thread saw that phase "
        "complete (it saw 0 phases)")


def test_a_block_refills_its_peer_once_the_peer_released_the_tile():
    x, out, report = run_tiles(multicast_tiles(second_copy=True))
    assert report.faults == []
    assert torch.equal(out[0], expected_box(x, 2 * ROWS, COLUMNS, (ROWS, COLUMNS), 0, 0))


def test_a_multicast_copy_into_a_peer_that_did_not_release_the_tile_is_a_race():
    """In the simulator the blocks run in step, so the peer is done reading here; on the GPU it may not be."""
    _, _, report = run_tiles(multicast_tiles(second_copy=True, peer_releases=False))
    assert report.faults == report.races and len(report.races) == 1
    assert report.races[0].startswith(
        "kernel multicast_tiles: tile[0][0] in block (1, 0, 0) written by a TMA copy multicast from block (0, 0, 0) "
        "by thread (0, 0, 0), though block (1, 0, 0) read it since it last told that thread (it may still be "
        "reading): that block must release the stage to the copying thread first")


def test_a_multicast_copy_landing_where_a_peer_wgmma_still_reads_is_a_race():
    """The peer releases the tile before waiting for the wgmma that reads it."""
    kernel = multicast_tiles(peer_wgmma=True)
    kir.verify_kernel(kernel)
    _, _, report = run_tiles(kernel)
    assert report.faults == report.races and len(report.races) == 1
    assert report.races[0].startswith(
        "kernel multicast_tiles: tile[0][0] in block (1, 0, 0) written by a TMA copy multicast from block (0, 0, 0) "
        "by thread (0, 0, 0) while `wgmma")
    assert "still reads it: wait for that wgmma (WgmmaWait) before overwriting its operands" in report.races[0]


def test_a_multicast_copy_needs_a_cluster_barrier_after_the_peer_init():
    _, _, report = run_tiles(multicast_tiles(after_init="block"))
    assert report.faults == report.async_protocol
    assert report.async_protocol[0] == (
        "kernel multicast_tiles: TMA copy completing on mbarrier full[0] of block (1, 0, 0) by block (0, 0, 0) thread "
        "(0, 0, 0), a thread of another block of its cluster, with no ClusterBarrier since thread (0, 0, 0) "
        "initialised it: put a ClusterBarrier after the init; 4 such accesses at this site")


def test_a_copy_into_a_block_that_never_waits_for_it_needs_a_final_cluster_barrier():
    _, _, report = run_tiles(multicast_tiles(peer_waits=False, final_barrier=False))
    assert len(report.races) == 1
    assert report.async_protocol == [
        "kernel multicast_tiles: a multicast TMA copy by block (0, 0, 0) thread (0, 0, 0) reaches mbarrier full[0] of "
        "block (1, 0, 0) after the last ClusterBarrier, in phase 0, which no thread of that block waits to see "
        "complete: the block of rank 1 may have ended; keep the cluster's blocks alive with a ClusterBarrier at the "
        "end; 2 such accesses at this site"]


# --- arrivals on another block's barrier ---------------------------------------


@pytest.mark.parametrize("final_barrier", [True, False])
def test_a_block_waits_for_the_arrival_of_its_peer(final_barrier):
    """The waiting block sees the phase complete, so it was still running when the arrival came."""
    kernel = remote_arrival(final_barrier=final_barrier)
    kir.verify_kernel(kernel)
    x, out, report = run_arrival(kernel)
    assert report.faults == []
    assert torch.equal(out, 2 * x)


def test_an_arrival_from_afar_needs_a_cluster_barrier_after_the_init():
    x, out, report = run_arrival(remote_arrival(after_init="block"))
    assert torch.equal(out, 2 * x)
    assert report.faults == [
        "kernel remote_arrival: arrive on mbarrier ready[0] of block (0, 0, 0) by block (1, 0, 0) thread (0, 0, 0), a "
        "thread of another block of its cluster, with no ClusterBarrier since thread (0, 0, 0) initialised it: put a "
        "ClusterBarrier after the init; 2 such accesses at this site"]


def test_an_arrival_on_a_rank_outside_the_cluster_is_out_of_bounds():
    _, _, report = run_arrival(remote_arrival(const(CLUSTER), waits=False))
    assert report.faults == [
        "kernel remote_arrival: arrive on ready[0] of the block of rank 2, outside its cluster of 2 blocks, by block "
        "(1, 0, 0) thread (0, 0, 0); 2 such accesses at this site"]


def test_an_arrival_on_a_block_that_may_have_ended_is_a_fault():
    _, _, report = run_arrival(remote_arrival(waits=False, final_barrier=False))
    assert report.faults == [
        "kernel remote_arrival: an arrival by block (1, 0, 0) thread (0, 0, 0) reaches mbarrier ready[0] of block "
        "(0, 0, 0) after the last ClusterBarrier, in phase 0, which no thread of that block waits to see complete: "
        "the block of rank 0 may have ended; keep the cluster's blocks alive with a ClusterBarrier at the end; 2 such "
        "accesses at this site"]

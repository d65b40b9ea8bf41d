"""Clusters in the simulator: blocks reading each other's shared memory, and the races it reports."""

from __future__ import annotations

import attrs
import pytest
import torch

from lamina.backends.cuda.codegen import emit_cuda, kernel_symbol
from lamina.backends.cuda.nvrtc import compile_kernel
from lamina.backends.reference.simulator import simulate
from lamina.core.errors import VerificationError
from lamina.core.ir import dtypes, kernel_ir as kir
from lamina.core.ir.expr import const, op

F32 = dtypes.float32
TX, BX = kir.thread_idx("x"), kir.block_idx("x")
CLUSTER = 4
THREADS = 32


def cluster_sums(*, publish_barrier: bool = True, final_barrier: bool = True, rank_limit: int = CLUSTER) -> kir.Kernel:
    """Each block of a cluster stores its threads' values; every block then adds up the
    element ``tx`` of the whole cluster: ``out[b, tx] = sum over the cluster's blocks c of x[c, tx]``."""
    gathered = kir.ClusterLoad("part", (TX,), const(0), F32)
    for rank in range(1, rank_limit):
        gathered = op("add", gathered, kir.ClusterLoad("part", (TX,), const(rank), F32))
    body = [kir.Store("part", (TX,), kir.Load("x", (BX * THREADS + TX,), F32))]
    body += [kir.ClusterBarrier()] if publish_barrier else []
    body.append(kir.Store("out", (BX * THREADS + TX,), gathered))
    body += [kir.ClusterBarrier()] if final_barrier else []
    blocks = 2 * CLUSTER
    return kir.Kernel(
        name="cluster_sums",
        params=[kir.Param("x", F32, blocks * THREADS), kir.Param("out", F32, blocks * THREADS, writable=True)],
        arrays=[kir.Array("part", F32, (THREADS,), "shared")],
        body=body,
        launch=kir.Launch((blocks, 1, 1), (THREADS, 1, 1), cluster=(CLUSTER, 1, 1)),
    )


def run(kernel: kir.Kernel):
    x = torch.randn(2 * CLUSTER * THREADS)
    arrays = {"x": x, "out": torch.full_like(x, float("nan"))}
    report = simulate(kernel, arrays, raise_on_fault=False)
    return x, arrays["out"], report


def test_each_block_reads_the_shared_memory_of_every_block_of_its_own_cluster():
    x, out, report = run(cluster_sums())
    assert (report.races, report.out_of_bounds, report.unwritten_reads) == ([], [], [])
    expected = x.view(2, CLUSTER, THREADS).sum(1, keepdim=True).expand(2, CLUSTER, THREADS).reshape(-1)
    torch.testing.assert_close(out, expected)


def test_reading_another_block_without_a_cluster_barrier_is_a_race():
    _, _, report = run(cluster_sums(publish_barrier=False))
    assert any("cluster load of part[" in r and "stored with no cluster barrier between" in r for r in report.races)


def test_a_block_that_may_finish_while_its_cluster_reads_it_is_a_race():
    _, _, report = run(cluster_sums(final_barrier=False))
    assert any("read by another block of its cluster after the last cluster barrier" in r for r in report.races)


def test_a_rank_outside_the_cluster_is_out_of_bounds():
    _, _, report = run(cluster_sums(rank_limit=CLUSTER + 1))
    assert any(f"of block {CLUSTER} of a cluster of {CLUSTER}" in r for r in report.out_of_bounds)


def test_kernel_ir_prints_the_cluster_and_its_loads():
    text = kir.format_kernel(cluster_sums())
    assert "grid (8, 1, 1)  block (32, 1, 1)  cluster (4, 1, 1)" in text
    assert "part[threadIdx.x] of cluster block 1" in text and "cluster barrier" in text


@pytest.mark.parametrize("launch, message", [
    (kir.Launch((6, 1, 1), (THREADS, 1, 1), cluster=(4, 1, 1)), "grid x of 6 blocks is not a whole number of clusters of 4"),
    (kir.Launch((32, 1, 1), (THREADS, 1, 1), cluster=(32, 1, 1)), r"clusters are 1 to 16 blocks along x"),
])
def test_the_verifier_rejects_clusters_the_gpu_cannot_launch(launch, message):
    with pytest.raises(VerificationError, match=message):
        kir.verify_kernel(attrs.evolve(cluster_sums(), launch=launch))


def test_the_cuda_source_declares_the_cluster_and_compiles_for_sm_90():
    kernel = cluster_sums()
    source = emit_cuda(kernel)
    assert "__cluster_dims__(4, 1, 1)" in source
    assert "mapa.shared::cluster.u32" in source and "barrier.cluster.wait.acquire;" in source
    compiled = compile_kernel(source, kernel_symbol(kernel), "sm_90")
    assert (compiled.spill_stores, compiled.spill_loads) == (0, 0)


def test_a_cluster_load_of_a_register_array_is_rejected():
    kernel = cluster_sums()
    wrong = attrs.evolve(kernel, arrays=[kir.Array("part", F32, (THREADS,), "register")])
    with pytest.raises(VerificationError, match="cluster load from part: it is not a shared array"):
        kir.verify_kernel(wrong)

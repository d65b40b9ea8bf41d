"""Can ``test_kernels_that_overlap_the_previous_one_read_what_it_wrote`` fail? Its chain of
kernels, each reading the previous one's output backwards, replayed from a CUDA graph with and
without the wait that an overlapping launch needs; buffers poisoned with NaN show early reads.

    python benchmarks/dependent_launch_race_check.py      (from the repository root)
"""

from __future__ import annotations

import torch

from lamina.backends.cuda import LaunchableKernel, compile_kernel, device_arch, emit_cuda, kernel_symbol
from lamina.backends.cuda.dependent_launch import WAIT_FOR_PREVIOUS_KERNEL
from lamina.backends.cuda.plugin import SM90
from lamina.plugins.kernel_passes import OverlapWithPreviousKernel
from tests.backends.cuda import kernels

ELEMENTS = (1 << 22) + 3
LAUNCHES = 6
REPLAYS = 20


def replays_with_early_reads(wait: bool) -> int:
    kernel = OverlapWithPreviousKernel().apply(kernels.reversed_halves(ELEMENTS), SM90)
    source = emit_cuda(kernel)
    if not wait:
        source = source.replace(WAIT_FOR_PREVIOUS_KERNEL, "")
    launchable = LaunchableKernel(kernel, compile_kernel(source, kernel_symbol(kernel), device_arch()))
    launchable.prepare()
    x = torch.randn(ELEMENTS, device="cuda")
    chain = [torch.full((ELEMENTS,), float("nan"), device="cuda") for _ in range(LAUNCHES)]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for source_tensor, result in zip([x, *chain], chain):
            launchable({"x": source_tensor, "y": result})
    early = 0
    for _ in range(REPLAYS):
        for result in chain:
            result.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        early += int(chain[-1].isnan().any().item())
    return early


if __name__ == "__main__":
    for wait in (False, True):
        print(f"graph, wait={wait}: replays with NaN in the last output: {replays_with_early_reads(wait)} of {REPLAYS}")

"""Where the last cluster barrier of the one-kernel attention scores should sit.

With ``…_online_exchange.patch`` applied and rows of up to 2048 columns spread over clusters
of 8 blocks, it times the scores at S = 2048 (CUDA-graph replay) with the kernel's CUDA
edited in one of two ways before NVRTC compiles it:

- ``after_stores``: as the patch emits it, a full barrier (arrive with release semantics,
  then wait) after the stores: each thread's release waits for its stores to complete;
- ``relaxed``: the same barrier arriving relaxed, without release semantics, so that no
  thread waits for its own stores.

    git apply benchmarks/results/2026-11-30_h200_online_exchange.patch
    python benchmarks/cluster_barrier_experiment.py
"""

import torch

import lamina
from lamina.backends.cuda import backend
from lamina.bench.measure import float64_reference, relative_error, time_cuda_graph
from lamina.plugins.schedules.matmul_row_reduction import tiling

FULL = 'asm volatile("barrier.cluster.arrive.release.aligned;\\n" "barrier.cluster.wait.acquire.aligned;\\n" ::: "memory");'
RELAXED_FULL = 'asm volatile("barrier.cluster.arrive.relaxed.aligned;\\n" "barrier.cluster.wait.aligned;\\n" ::: "memory");'


def edited(source: str, variant: str) -> str:
    if FULL not in source or variant == "after_stores":
        return source
    head, last = source.rsplit(FULL, 1)
    return head + RELAXED_FULL + last


def scores(q, k, causal):
    s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return torch.softmax(s, -1)


def main():
    tiling.MAX_BLOCKS_PER_ROW = 8
    tiling.MAX_CLUSTER_ROW_LENGTH = 8 * tiling.CLUSTER_COLUMNS
    original = backend.emit_cuda
    for variant in ("after_stores", "relaxed"):
        backend.emit_cuda = lambda kernel, v=variant: edited(original(kernel), v)
        for model, (heads, d) in {"tinyllama": (32, 64), "qwen": (28, 128)}.items():
            for causal in (False, True):
                torch.manual_seed(0)
                q = torch.randn(1, heads, 2048, d, device="cuda")
                k = torch.randn(1, heads, 2048, d, device="cuda")

                def fn(q, k):
                    return scores(q, k, causal)

                compiled = lamina.compile(fn, (q, k))
                source = next(iter(compiled.compilation.sources.values()))
                kernels = len(compiled.compilation.tiles)
                error = relative_error(compiled(q, k)[:, :1], float64_reference(fn, (q[:, :1], k[:, :1])))
                us = time_cuda_graph(compiled, (q, k), replays=50)
                print(f"{variant:13s} {model:9s} {'causal' if causal else 'plain ':6s} {us:7.1f} us  "
                      f"{kernels} kernel(s), error {error:.1e}, relaxed arrive: {'barrier.cluster.arrive.relaxed' in source}",
                      flush=True)


if __name__ == "__main__":
    main()

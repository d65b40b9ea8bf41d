"""How many of the scores' clusters an H200 holds at once, against the blocks its SMs hold.

A cluster launches only where all its blocks fit at once on the SMs of one GPC. For the
attention scores as one kernel on wgmma (``tensor_cores = 2`` pinned), in each block shape
and at S = 1024 and 2048, this asks the driver how many clusters can be resident at once
(``cuOccupancyMaxActiveClusters``) and how many blocks one SM holds
(``cuOccupancyMaxActiveBlocksPerMultiprocessor``), and prints the blocks the clusters hold
against the SMs' slots for blocks. Run on the GPU:

    python experiments/attention_scores/cluster_occupancy_experiment.py > results.txt
"""

import torch
from cuda.bindings import driver

import lamina
from lamina.backends.cuda.backend import CudaBackend
from lamina.backends.cuda.codegen import launch_shared_bytes
from lamina.backends.cuda.driver import LaunchableKernel, check

MODELS = {"tinyllama": (32, 64), "qwen": (28, 128)}
"""Heads and head size of each model's attention."""
BLOCKS = ((64, 64), (64, 128), (128, 64), (128, 128))


def scores(q, k):
    return torch.softmax(q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5, -1)


def occupancy(kernel, function) -> tuple[int, int]:
    """Clusters resident at once, and blocks per SM, of ``kernel`` loaded as ``function``."""
    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = kernel.launch.grid
    config.blockDimX, config.blockDimY, config.blockDimZ = kernel.launch.block
    config.sharedMemBytes = launch_shared_bytes(kernel)
    cluster = driver.CUlaunchAttribute()
    cluster.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    cluster.value.clusterDim.x, cluster.value.clusterDim.y, cluster.value.clusterDim.z = kernel.launch.cluster
    config.attrs = [cluster]
    config.numAttrs = 1
    result, clusters = driver.cuOccupancyMaxActiveClusters(function, config)
    check(result, "cuOccupancyMaxActiveClusters", kernel.name)
    threads = kernel.launch.block[0] * kernel.launch.block[1] * kernel.launch.block[2]
    result, per_sm = driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(function, threads, config.sharedMemBytes)
    check(result, "cuOccupancyMaxActiveBlocksPerMultiprocessor", kernel.name)
    return clusters, per_sm


def main():
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    backend = CudaBackend()
    for model, (heads, d) in MODELS.items():
        for length in (1024, 2048):
            q, k = (torch.randn(1, heads, length, d, device="cuda") for _ in range(2))
            for block_m, block_n in BLOCKS:
                knobs = {"matmul_row_reduction": {"products": "wgmma", "block_m": block_m, "block_n": block_n}}
                compilation = lamina.compile(scores, (q, k), knobs=knobs).specialization((q, k)).compilation
                if [t.schedule for t in compilation.tiles] != ["matmul_row_reduction"]:
                    print(f"{model} S={length} {block_m}x{block_n}: not one kernel", flush=True)
                    continue
                (kernel,) = compilation.kernels.kernels
                function = LaunchableKernel(kernel, backend.compile(compilation.kernels, "sm_90")[kernel.name]).prepare()
                clusters, per_sm = occupancy(kernel, function)
                size = kernel.launch.cluster[0]
                print(f"{model} S={length} {block_m}x{block_n}: clusters of {size}, {clusters} at once holding "
                      f"{clusters * size} blocks, of {per_sm * sms} that {sms} SMs hold "
                      f"({clusters * size / (per_sm * sms):.0%})", flush=True)


if __name__ == "__main__":
    main()

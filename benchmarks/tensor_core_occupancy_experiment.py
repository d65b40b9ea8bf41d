"""Whether the tensor-core contraction runs faster with its registers capped for more warps per SM.

The three-piece tensor-core products of ``benchmarks/tensor_core_experiment.py`` ran about
as fast as the FMA kernels, and Nsight Compute found their 64 x 128 blocks, at 167
registers a thread, with three blocks (12 warps) per SM and a warp eligible to issue on
about a third of the cycles (``benchmarks/results/2026-11-30_h200_ncu_tensor_cores_linear_o_s2048.txt``).
This edits the emitted ``__launch_bounds__(128)`` to ``__launch_bounds__(128, 4)``, so that
NVRTC keeps 128 registers and four blocks fit, and times each case with the FMA kernels,
the tensor-core kernels as emitted, and the edited ones, by CUDA-graph replay:

    python benchmarks/tensor_core_occupancy_experiment.py
"""

import sys

from edited_cuda import time_variants

TENSOR_CORES = {"tensor_cores": 1, "block_m": 64, "block_n": 128, "thread_m": 8, "thread_n": 8}


def four_blocks(source: str) -> str:
    return source.replace("__launch_bounds__(128)", "__launch_bounds__(128, 4)")


VARIANTS = [("fma", {"tensor_cores": 0}, None), ("tensor cores", TENSOR_CORES, None),
            ("tensor cores, 128 registers", TENSOR_CORES, four_blocks)]

if __name__ == "__main__":
    time_variants(sys.argv[1:] or ["*.linear_*.s2048.fp32", "*.linear_*.s128.fp32", "*.scores.s2048.fp32"], VARIANTS)

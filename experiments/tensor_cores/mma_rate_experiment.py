"""Measure how fast the tensor cores run ``mma.sync`` alone: the ceiling of lamina's tensor-core products.

    python experiments/tensor_cores/mma_rate_experiment.py --out experiments/tensor_cores/DATE_GPU_mma_rate.json

Each warp runs a long loop of ``mma.sync`` on operands held in registers, into
``--chains`` independent accumulators (enough to cover the mma's latency), with no memory
traffic; the grid keeps every SM busy with 4 to 16 warps. The rate it reaches, m16n8k8
on tf32 and m16n8k16 on bf16, is what a contraction built of these instructions can at
most reach, whatever its loads and splits cost.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import torch

from lamina.backends.cuda.driver import LaunchableKernel
from lamina.backends.cuda.nvrtc import compile_kernel
from lamina.core.ir import dtypes, kernel_ir

KINDS = {
    "tf32 m16n8k8": ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", 16 * 8 * 8),
    "bf16 m16n8k16": ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", 16 * 8 * 16),
}
ITERATIONS = 4096
THREADS = 128

SOURCE = """\
extern "C" __global__ void __launch_bounds__(128) {name}(float* __restrict__ out) {{
  const unsigned a0 = threadIdx.x * 2654435761u, a1 = a0 ^ 0x3f800000u, a2 = a0 + 7u, a3 = a1 + 11u;
  const unsigned b0 = a0 >> 3, b1 = a1 >> 5;
  float d[{chains}][4] = {{}};
  for (int i = 0; i < {iterations}; ++i) {{
#pragma unroll
    for (int c = 0; c < {chains}; ++c) {{
      asm volatile("{instruction} {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};\\n"
                   : "+f"(d[c][0]), "+f"(d[c][1]), "+f"(d[c][2]), "+f"(d[c][3])
                   : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }}
  }}
  float sum = 0.0f;
#pragma unroll
  for (int c = 0; c < {chains}; ++c) sum += d[c][0] + d[c][1] + d[c][2] + d[c][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}}
"""


def rate(kind: str, chains: int, blocks_per_sm: int) -> dict:
    instruction, flops_per_mma = KINDS[kind]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    blocks = sms * blocks_per_sm
    name = "mma_rate"
    source = SOURCE.format(name=name, chains=chains, iterations=ITERATIONS, instruction=instruction)
    compiled = compile_kernel(source, name, "sm_90")
    out = torch.empty(blocks * THREADS, device="cuda")
    kernel = kernel_ir.Kernel(name, (kernel_ir.Param("out", dtypes.float32, out.numel(), writable=True),), (), (),
                              kernel_ir.Launch((blocks, 1, 1), (THREADS, 1, 1)))
    launch = LaunchableKernel(kernel, compiled)
    launch({"out": out})
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(5):
        start.record()
        launch({"out": out})
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    us = sorted(times)[len(times) // 2]
    mmas = blocks * THREADS // 32 * ITERATIONS * chains
    return {"kind": kind, "chains": chains, "warps_per_sm": blocks_per_sm * THREADS // 32, "us": us,
            "tflops": mmas * 2 * flops_per_mma / us / 1e6, "registers": compiled.registers}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("experiments/tensor_cores/mma_rate_experiment.py needs a CUDA GPU", file=sys.stderr)
        return 2
    record = {"command": f"python experiments/tensor_cores/mma_rate_experiment.py --out experiments/tensor_cores/{Path(args.out).name}",
              "date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
              "method": "median of 5 launches timed with CUDA events; FLOP = 2 m n k per mma", "rows": []}
    for kind in KINDS:
        for chains in (4, 8, 16):
            for blocks_per_sm in (1, 2, 4):
                row = rate(kind, chains, blocks_per_sm)
                record["rows"].append(row)
                print(f"{kind}: {chains} chains, {row['warps_per_sm']} warps/SM: {row['tflops']:.1f} TFLOP/s "
                      f"({row['us']:.0f} us)", flush=True)
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

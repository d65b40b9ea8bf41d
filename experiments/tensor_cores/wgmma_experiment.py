"""How fast, and how close to float64, fp32 products run on Hopper's warpgroup mma (``wgmma``).

    python experiments/tensor_cores/wgmma_experiment.py --out experiments/tensor_cores/DATE_GPU_wgmma_experiment.json

Before the contraction schedule learns ``wgmma``, this measures what it would gain. The kernel
here is written by hand, not by lamina: 128 x 128 output blocks of two warpgroups, each
running ``wgmma.mma_async`` m64n128k8 on tf32 with both operands read from shared memory
through matrix descriptors. ``cp.async`` copies 32-deep k-tiles into a ring of ``--stages``
buffers laid out in the 128-byte swizzle the descriptors name. Variants:

- ``1xtf32``: the raw float32 operands go to the tensor cores, which read their tf32 part:
  the rate ceiling of this kernel, not an fp32 product.
- ``3xtf32``: each k-tile, once it lands, is split in shared memory into its nearest tf32
  ("big", written in place) and the rest ("small"); each step of eight k is three wgmma
  (small x big, big x small, big x big), summed from zero over ``steps_per_sum`` steps and
  then added to the accumulators with float32 additions, as lamina's ``mma.sync`` kernels do
  every step.

Each variant runs the sixteen linears of the suite and the q k^T of the attention scores at
S = 2048, timed by CUDA-graph replay (median) beside cuBLAS SGEMM through eager PyTorch (TF32
off), each with its error against a float64 product (norm of the difference over the norm of
the product).
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
from lamina.bench.measure import time_cuda_graph
from lamina.core.ir import dtypes, kernel_ir

LINEARS = {"tl.qkv": (2560, 2048), "tl.o": (2048, 2048), "tl.gate_up": (11264, 2048), "tl.down": (2048, 5632),
           "qw.qkv": (4608, 3584), "qw.o": (3584, 3584), "qw.gate_up": (37888, 3584), "qw.down": (3584, 18944)}
"""(N, K) of each linear of the suite."""
SCORES = {"tl.scores": (32, 64), "qw.scores": (28, 128)}
"""(heads, head size) of each model's attention; the product is ``q @ k^T`` at S = 2048."""
BLOCK_M, BLOCK_N, BLOCK_K = 128, 128, 32
THREADS = 256
VARIANTS = {"1xtf32": None, "3xtf32 sum per 8": 1, "3xtf32 sum per 16": 2, "3xtf32 sum per 32": 4}
"""Variant name -> steps of eight k summed on the tensor cores before a float32 addition (None: 1xtf32)."""

SOURCE = r"""
#define M {m}
#define N {n}
#define K {k}
#define STAGES {stages}
#define BM 128
#define BN 128
#define BK 32
#define KT (K / BK)
#define TILE_A (BM * BK * 4)
#define TILE_B (BN * BK * 4)
#define STAGE_BYTES (2 * TILE_A + 2 * TILE_B)

__device__ __forceinline__ unsigned long long descriptor(unsigned address) {{
  return (unsigned long long)((address & 0x3FFFF) >> 4) | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32)
       | (1ull << 62);
}}

__device__ __forceinline__ void wgmma(float* d, unsigned long long a, unsigned long long b, int accumulate) {{
  asm volatile("{{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {{{outputs}}}, %64, %65, p, 1, 1;\n}}\n"
               : {constraints}
               : "l"(a), "l"(b), "r"(accumulate));
}}

__device__ __forceinline__ void copy_tile(unsigned stage, const float* a, const float* b, int t, int tid) {{
#pragma unroll
  for (int i = 0; i < BM * 8 / 256; ++i) {{
    int chunk = tid + i * 256, r = chunk >> 3, c = chunk & 7;
    unsigned dst = stage + r * 128 + ((c ^ (r & 7)) << 4);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(dst), "l"(a + (size_t)r * K + t * BK + c * 4));
  }}
#pragma unroll
  for (int i = 0; i < BN * 8 / 256; ++i) {{
    int chunk = tid + i * 256, r = chunk >> 3, c = chunk & 7;
    unsigned dst = stage + TILE_A + r * 128 + ((c ^ (r & 7)) << 4);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(dst), "l"(b + (size_t)r * K + t * BK + c * 4));
  }}
}}

__device__ __forceinline__ float nearest_tf32(float x) {{
  return __uint_as_float((__float_as_uint(x) + 0x1000u) & 0xffffe000u);
}}

__device__ __forceinline__ void split(float* big, float* small) {{
  float4 x = *(float4*)big;
  float4 h = make_float4(nearest_tf32(x.x), nearest_tf32(x.y), nearest_tf32(x.z), nearest_tf32(x.w));
  *(float4*)big = h;
  *(float4*)small = make_float4(x.x - h.x, x.y - h.y, x.z - h.z, x.w - h.w);
}}

extern "C" __global__ void __launch_bounds__(256, 1) wgmma_product(const float* __restrict__ a,
                                                                   const float* __restrict__ b,
                                                                   float* __restrict__ c) {{
  extern __shared__ __align__(1024) unsigned char raw[];
  unsigned raw_address = (unsigned)__cvta_generic_to_shared(raw);
  unsigned base = (raw_address + 1023) & ~1023u;
  unsigned char* smem = raw + (base - raw_address);
  const int tid = threadIdx.x, group = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  a += (size_t)blockIdx.z * M * K + (size_t)m0 * K;
  b += (size_t)blockIdx.z * N * K + (size_t)n0 * K;
  c += (size_t)blockIdx.z * M * N;
  float acc[64], part[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
#pragma unroll
  for (int t = 0; t < STAGES - 1; ++t) {{
    if (t < KT) copy_tile(base + t * STAGE_BYTES, a, b, t, tid);
    asm volatile("cp.async.commit_group;\n");
  }}
  for (int t = 0; t < KT; ++t) {{
    const int s = t % STAGES;
    const unsigned stage = base + s * STAGE_BYTES;
    asm volatile("cp.async.wait_group %0;\n" :: "n"(STAGES - 2));
    __syncthreads();
{split_tile}
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    if (t + STAGES - 1 < KT) copy_tile(base + ((t + STAGES - 1) % STAGES) * STAGE_BYTES, a, b, t + STAGES - 1, tid);
    asm volatile("cp.async.commit_group;\n");
    const unsigned a_big = stage + group * 64 * 128, b_big = stage + TILE_A;
    const unsigned a_small = stage + TILE_A + TILE_B + group * 64 * 128, b_small = stage + 2 * TILE_A + TILE_B;
{steps}
  }}
#pragma unroll
  for (int i = 0; i < 64; i += 2) {{
    int row = m0 + group * 64 + warp * 16 + (lane >> 2) + 8 * ((i >> 1) & 1);
    int column = n0 + 8 * (i >> 2) + 2 * (lane & 3);
    *(float2*)(c + (size_t)row * N + column) = make_float2(acc[i], acc[i + 1]);
  }}
}}
"""

SPLIT_TILE = r"""
#pragma unroll
    for (int i = 0; i < (BM + BN) * 8 / 256; ++i) {
      int chunk = tid + i * 256;
      split((float*)(smem + s * STAGE_BYTES + chunk * 16), (float*)(smem + s * STAGE_BYTES + TILE_A + TILE_B + chunk * 16));
    }
"""

ONE_PRODUCT_STEPS = r"""
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int j = 0; j < 4; ++j) wgmma(acc, descriptor(a_big + j * 32), descriptor(b_big + j * 32), 1);
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
"""

THREE_PRODUCT_STEPS = r"""
#pragma unroll
    for (int first = 0; first < 4; first += {per_sum}) {{
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
      for (int j = first; j < first + {per_sum}; ++j) {{
        wgmma(part, descriptor(a_small + j * 32), descriptor(b_big + j * 32), j != first);
        wgmma(part, descriptor(a_big + j * 32), descriptor(b_small + j * 32), 1);
        wgmma(part, descriptor(a_big + j * 32), descriptor(b_big + j * 32), 1);
      }}
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
      for (int i = 0; i < 64; ++i) acc[i] += part[i];
    }}
"""


def source(m: int, n: int, k: int, stages: int, per_sum: int | None) -> str:
    outputs = ", ".join(f"%{i}" for i in range(64))
    constraints = ", ".join(f'"+f"(d[{i}])' for i in range(64))
    steps = ONE_PRODUCT_STEPS if per_sum is None else THREE_PRODUCT_STEPS.format(per_sum=per_sum)
    return SOURCE.format(m=m, n=n, k=k, stages=stages, outputs=outputs, constraints=constraints,
                         split_tile="" if per_sum is None else SPLIT_TILE, steps=steps)


def product_kernel(m: int, n: int, k: int, batch: int, stages: int, per_sum: int | None) -> LaunchableKernel:
    if m % BLOCK_M or n % BLOCK_N or k % BLOCK_K:
        raise ValueError(f"{m} x {n} x {k} is not a multiple of the {BLOCK_M} x {BLOCK_N} x {BLOCK_K} tiles")
    compiled = compile_kernel(source(m, n, k, stages, per_sum), "wgmma_product", "sm_90a")
    if compiled.spills:
        print(f"  spills: {compiled.spill_stores} bytes stored", flush=True)
    stage_bytes = 2 * (BLOCK_M + BLOCK_N) * BLOCK_K * 4
    params = (kernel_ir.Param("a", dtypes.float32, batch * m * k), kernel_ir.Param("b", dtypes.float32, batch * n * k),
              kernel_ir.Param("c", dtypes.float32, batch * m * n, writable=True))
    launch = kernel_ir.Launch((n // BLOCK_N, m // BLOCK_M, batch), (THREADS, 1, 1), stages * stage_bytes + 1024)
    return LaunchableKernel(kernel_ir.Kernel("wgmma_product", params, (), (), launch), compiled)


def error(out: torch.Tensor, reference: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(out.double() - reference) / torch.linalg.vector_norm(reference))


def cases():
    for m in (128, 2048):
        for name, (n, k) in LINEARS.items():
            yield f"{name}.m{m}", 1, m, n, k
    for name, (heads, size) in SCORES.items():
        yield name, heads, 2048, 2048, size


def measure(name: str, batch: int, m: int, n: int, k: int, stages: int, replays: int, variants: list[str]) -> dict:
    a = torch.randn(batch, m, k, device="cuda")
    b = torch.randn(batch, n, k, device="cuda") / k ** 0.5
    reference = torch.matmul(a.double(), b.double().transpose(-1, -2))
    out = torch.empty(batch, m, n, device="cuda")
    cublas_out = torch.matmul(a, b.transpose(-1, -2))
    cublas_us = time_cuda_graph(lambda: torch.matmul(a, b.transpose(-1, -2), out=out), (), replays)
    flops = 2 * batch * m * n * k
    row = {"case": name, "batch": batch, "m": m, "n": n, "k": k, "stages": stages,
           "cublas": {"us": cublas_us, "tflops": flops / cublas_us / 1e6, "error": error(cublas_out, reference)}}
    buffers = {"a": a.reshape(-1), "b": b.reshape(-1), "c": out.reshape(-1)}
    for variant in variants:
        kernel = product_kernel(m, n, k, batch, stages, VARIANTS[variant])
        out.fill_(float("nan"))
        kernel(buffers)
        torch.cuda.synchronize()
        err = error(out, reference)
        us = time_cuda_graph(lambda: kernel(buffers), (), replays)
        row[variant] = {"us": us, "tflops": flops / us / 1e6, "error": err,
                        "registers": kernel.compiled.registers, "vs_cublas": cublas_us / us}
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--replays", type=int, default=20)
    parser.add_argument("--stages", type=int, default=3, choices=(2, 3))
    parser.add_argument("--case", action="append", help="time only cases whose name starts with this")
    parser.add_argument("--variant", action="append", choices=sorted(VARIANTS))
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("experiments/tensor_cores/wgmma_experiment.py needs a CUDA GPU", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    variants = args.variant or list(VARIANTS)
    record = {"command": "python experiments/tensor_cores/wgmma_experiment.py " + " ".join(argv or sys.argv[1:]),
              "date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
              "method": f"CUDA-graph replay, median of {args.replays}; error = |out - float64| / |float64|",
              "rows": []}
    for name, batch, m, n, k in cases():
        if args.case and not any(name.startswith(c) for c in args.case):
            continue
        row = measure(name, batch, m, n, k, args.stages, args.replays, variants)
        record["rows"].append(row)
        cublas = row["cublas"]
        print(f"{name}: cuBLAS {cublas['us']:.1f} us {cublas['tflops']:.1f} TFLOP/s err {cublas['error']:.1e}",
              flush=True)
        for variant in variants:
            v = row[variant]
            print(f"  {variant}: {v['us']:.1f} us {v['tflops']:.1f} TFLOP/s err {v['error']:.1e} "
                  f"({v['vs_cublas']:.2f}x cuBLAS, {v['registers']} registers)", flush=True)
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

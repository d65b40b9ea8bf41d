"""Where the attention scores' wgmma products lose their time: a hand-written kernel of lamina's
design, with what it does changed one thing at a time.

    python benchmarks/score_sweep_experiment.py --out benchmarks/results/DATE_GPU_score_sweep_experiment.json
    python benchmarks/score_sweep_experiment.py --settings sweeps --case tl.scores --case qw.scores --out …

The scores' products ``q @ k^T`` at S = 2048 are short (K = 64 and 128: two and four 32-deep
k-tiles). The kernel is written the way lamina's wgmma kernels were: 128-row blocks of two
warpgroups, k-tiles copied by ``cp.async`` into 128-byte-swizzled rows and split in place into
big and small tf32 parts, three wgmma per eight k summed over each k-tile and then added in
float32, outputs stored two adjacent floats at a time from the accumulators. Each setting
(``SETTINGS``) changes it: a block may sweep several column tiles in one flattened loop over
(tile, k-tile), the copies running ahead across tile boundaries; blocks may run down the rows
or along the columns; A's values may be read into registers and split there instead of in
shared memory (``wgmma`` with A from registers); and the outputs may be stored or not, which
shows what the stores cost. ``--settings registers`` (the default) tries A in registers,
``--settings sweeps`` the sweeps. The suite's TinyLlama o projection at M = 2048 is a product of
the same form. Timed by CUDA-graph replay (median) beside cuBLAS and lamina's own kernel, also
with its stores kept only for a value no output has; each checked against a float64 product first.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
from pathlib import Path

import torch

import lamina
from lamina.backends.cuda import backend
from lamina.backends.cuda.driver import LaunchableKernel
from lamina.backends.cuda.nvrtc import compile_kernel
from lamina.bench.measure import time_cuda_graph
from lamina.core.ir import dtypes, kernel_ir

SCORES = {"tl.scores": (32, 64), "qw.scores": (28, 128), "tl.o": (1, 2048)}
"""(heads, head size) of each model's attention, whose product is ``q @ k^T`` at S = 2048, and
TinyLlama's o projection at M = 2048 as a product of the same form."""
S = 2048
BM, BK, THREADS = 128, 32, 256
SETTINGS = {
    "registers": [(64, 1, 3, True, False, True), (64, 1, 3, True, False, False), (64, 4, 3, True, False, True),
                  (64, 1, 3, True, True, True), (64, 1, 3, True, True, False), (64, 4, 3, True, True, True),
                  (64, 8, 2, True, True, True), (128, 1, 3, True, True, True), (128, 4, 3, True, True, True),
                  (128, 4, 2, True, True, True)],
    "sweeps": [(bn, sweep, stages, rows_first, False, store)
               for bn, sweep, stages, rows_first in [(64, 1, 3, False), (64, 4, 3, False), (64, 1, 3, True),
                                                     (64, 4, 3, True), (64, 8, 3, True), (64, 16, 3, True),
                                                     (64, 8, 2, True), (128, 1, 3, True), (128, 4, 3, True)]
               for store in (True, False)],
}
"""Groups of settings (``--settings``), each (block columns, column tiles a block sweeps, k-tile
buffers, whether consecutive blocks run down the rows rather than along the columns, whether A's
fragments are read into registers and split there rather than split in shared memory, whether
the outputs are stored)."""

SOURCE = r"""
#define N {n}
#define K {k}
#define BN {bn}
#define SWEEP {sweep}
#define STAGES {stages}
#define STORE {store}
#define ROWS_FIRST {rows_first}
#define A_REGISTERS {a_registers}
#define BM 128
#define BK 32
#define KT (K / BK)
#define TILE_A (BM * BK * 4)
#define TILE_B (BN * BK * 4)

__device__ __forceinline__ unsigned long long descriptor(unsigned address) {{
  return (unsigned long long)((address & 0x3FFFF) >> 4) | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32)
       | (1ull << 62);
}}

__device__ __forceinline__ void wgmma(float* d, unsigned long long a, unsigned long long b, int accumulate) {{
  asm volatile("{{\n.reg .pred p;\nsetp.ne.b32 p, %{pred}, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n{bn}k8.f32.tf32.tf32 {{{outputs}}}, %{da}, %{db}, p, 1, 1;\n}}\n"
               : {constraints}
               : "l"(a), "l"(b), "r"(accumulate));
}}

__device__ __forceinline__ void wgmma_registers(float* d, const float* a, unsigned long long b, int accumulate) {{
  asm volatile("{{\n.reg .pred p;\nsetp.ne.b32 p, %{rpred}, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n{bn}k8.f32.tf32.tf32 {{{outputs}}}, {{%{ra0}, %{ra1}, %{ra2}, %{ra3}}}, %{rdb}, p, 1, 1;\n}}\n"
               : {constraints}
               : "r"(__float_as_uint(a[0])), "r"(__float_as_uint(a[1])), "r"(__float_as_uint(a[2])),
                 "r"(__float_as_uint(a[3])), "l"(b), "r"(accumulate));
}}

__device__ __forceinline__ void copy_rows(unsigned dst_base, const float* src, int rows, int tid) {{
  for (int chunk = tid; chunk < rows * 8; chunk += 256) {{
    int r = chunk >> 3, c = chunk & 7;
    unsigned dst = dst_base + r * 128 + ((c ^ (r & 7)) << 4);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(dst), "l"(src + (size_t)r * K + c * 4));
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

extern "C" __global__ void __launch_bounds__(256) swept_product(const float* __restrict__ a,
                                                                const float* __restrict__ b,
                                                                float* __restrict__ c) {{
  extern __shared__ __align__(1024) unsigned char raw[];
  unsigned raw_address = (unsigned)__cvta_generic_to_shared(raw);
  unsigned base = (raw_address + 1023) & ~1023u;
  unsigned char* smem = raw + (base - raw_address);
  const unsigned a_tiles = base, b_tiles = base + STAGES * TILE_A;
  const unsigned a_small = b_tiles + STAGES * TILE_B, b_small = a_small + TILE_A;
  const int tid = threadIdx.x, group = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int m0 = (ROWS_FIRST ? blockIdx.x : blockIdx.y) * BM, first_tile = (ROWS_FIRST ? blockIdx.y : blockIdx.x) * SWEEP;
  a += (size_t)blockIdx.z * N * K + (size_t)m0 * K;
  b += (size_t)blockIdx.z * N * K;
  c += (size_t)blockIdx.z * N * N;
  float acc[BN / 2], part[BN / 2];
  const int steps = SWEEP * KT;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {{
    if (s < steps) {{
      int tile = first_tile + s / KT, kt = s % KT;
      copy_rows(a_tiles + s * TILE_A, a + kt * BK, BM, tid);
      copy_rows(b_tiles + s * TILE_B, b + (size_t)tile * BN * K + kt * BK, BN, tid);
    }}
    asm volatile("cp.async.commit_group;\n");
  }}
  for (int s = 0; s < steps; ++s) {{
    const int slot = s % STAGES, tile = first_tile + s / KT, kt = s % KT;
    asm volatile("cp.async.wait_group %0;\n" :: "n"(STAGES - 2));
    __syncthreads();
#if A_REGISTERS
    float a_big[16], a_small_part[16];
    {{
      const float* a_slot = (const float*)(smem + slot * TILE_A);
#pragma unroll
      for (int i = 0; i < 16; ++i) {{
        int r = group * 64 + warp * 16 + (lane >> 2) + 8 * (i & 1), col = 8 * (i >> 2) + (lane & 3) + 4 * ((i >> 1) & 1);
        float x = a_slot[r * 32 + (((col >> 2) ^ (r & 7)) << 2) + (col & 3)];
        a_big[i] = nearest_tf32(x);
        a_small_part[i] = x - a_big[i];
      }}
    }}
#else
    for (int chunk = tid; chunk < BM * 8; chunk += 256)
      split((float*)(smem + slot * TILE_A + chunk * 16), (float*)(smem + (a_small - base) + chunk * 16));
#endif
    for (int chunk = tid; chunk < BN * 8; chunk += 256)
      split((float*)(smem + (b_tiles - base) + slot * TILE_B + chunk * 16), (float*)(smem + (b_small - base) + chunk * 16));
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    const int ahead = s + STAGES - 1;
    if (ahead < steps) {{
      int ahead_tile = first_tile + ahead / KT, ahead_kt = ahead % KT, ahead_slot = ahead % STAGES;
      copy_rows(a_tiles + ahead_slot * TILE_A, a + ahead_kt * BK, BM, tid);
      copy_rows(b_tiles + ahead_slot * TILE_B, b + (size_t)ahead_tile * BN * K + ahead_kt * BK, BN, tid);
    }}
    asm volatile("cp.async.commit_group;\n");
    const unsigned ab = a_tiles + slot * TILE_A + group * 64 * 128, bb = b_tiles + slot * TILE_B;
    const unsigned as = a_small + group * 64 * 128, bs = b_small;
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int j = 0; j < 4; ++j) {{
#if A_REGISTERS
      wgmma_registers(part, a_small_part + 4 * j, descriptor(bb + j * 32), j != 0);
      wgmma_registers(part, a_big + 4 * j, descriptor(bs + j * 32), 1);
      wgmma_registers(part, a_big + 4 * j, descriptor(bb + j * 32), 1);
#else
      wgmma(part, descriptor(as + j * 32), descriptor(bb + j * 32), j != 0);
      wgmma(part, descriptor(ab + j * 32), descriptor(bs + j * 32), 1);
      wgmma(part, descriptor(ab + j * 32), descriptor(bb + j * 32), 1);
#endif
    }}
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#if A_REGISTERS
#pragma unroll
    for (int i = 0; i < 16; ++i) asm volatile("" : "+f"(a_big[i]), "+f"(a_small_part[i]) :: "memory");
#endif
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = kt == 0 ? part[i] : acc[i] + part[i];
    if (kt == KT - 1) {{
#pragma unroll
      for (int i = 0; i < BN / 2; i += 2) {{
        int row = m0 + group * 64 + warp * 16 + (lane >> 2) + 8 * ((i >> 1) & 1);
        int column = tile * BN + 8 * (i >> 2) + 2 * (lane & 3);
        if (STORE || acc[i] == 1e30f) *(float2*)(c + (size_t)row * N + column) = make_float2(acc[i], acc[i + 1]);
      }}
    }}
  }}
}}
"""


def source(n: int, k: int, bn: int, sweep: int, stages: int, store: bool, rows_first: bool,
           a_registers: bool) -> str:
    outputs = ", ".join(f"%{i}" for i in range(bn // 2))
    constraints = ", ".join(f'"+f"(d[{i}])' for i in range(bn // 2))
    return SOURCE.format(n=n, k=k, bn=bn, sweep=sweep, stages=stages, store=int(store), rows_first=int(rows_first),
                         a_registers=int(a_registers), outputs=outputs, constraints=constraints,
                         da=bn // 2, db=bn // 2 + 1, pred=bn // 2 + 2, ra0=bn // 2, ra1=bn // 2 + 1,
                         ra2=bn // 2 + 2, ra3=bn // 2 + 3, rdb=bn // 2 + 4, rpred=bn // 2 + 5)


def product_kernel(heads: int, k: int, bn: int, sweep: int, stages: int, store: bool, rows_first: bool,
                   a_registers: bool) -> LaunchableKernel:
    compiled = compile_kernel(source(S, k, bn, sweep, stages, store, rows_first, a_registers), "swept_product",
                              "sm_90a")
    if compiled.spills:
        print(f"  spills: {compiled.spill_stores} bytes stored", flush=True)
    shared = stages * (BM + bn) * BK * 4 + (BM + bn) * BK * 4 + 1024
    params = (kernel_ir.Param("a", dtypes.float32, heads * S * k), kernel_ir.Param("b", dtypes.float32, heads * S * k),
              kernel_ir.Param("c", dtypes.float32, heads * S * S, writable=True))
    grid = (S // BM, S // bn // sweep, heads) if rows_first else (S // bn // sweep, S // BM, heads)
    launch = kernel_ir.Launch(grid, (THREADS, 1, 1), shared)
    return LaunchableKernel(kernel_ir.Kernel("swept_product", params, (), (), launch), compiled)


LAMINA_STORE = re.compile(r"^(\s*)(\*reinterpret_cast<uint2\*>\(&bmm\[.*\]\) = .*;)$", re.M)


def without_stores(source: str) -> str:
    """lamina's product kernel with each store of its outputs kept only for a value no output has."""
    return LAMINA_STORE.sub(r"\1if (bmm_out[0] == 1e30f) \2", source)


def scores_product(q, k):
    return torch.matmul(q, k.transpose(-1, -2))


def error(out: torch.Tensor, reference: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(out.double() - reference) / torch.linalg.vector_norm(reference))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--replays", type=int, default=20)
    parser.add_argument("--settings", choices=sorted(SETTINGS), default="registers")
    parser.add_argument("--case", action="append", choices=sorted(SCORES), help="only these products")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks/score_sweep_experiment.py needs a CUDA GPU", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    record = {"command": "python benchmarks/score_sweep_experiment.py " + " ".join(argv or sys.argv[1:]),
              "date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
              "method": f"CUDA-graph replay, median of {args.replays}; error = |out - float64| / |float64|",
              "rows": []}
    for name, (heads, k) in SCORES.items():
        if args.case and name not in args.case:
            continue
        q = torch.randn(heads, S, k, device="cuda")
        key = torch.randn(heads, S, k, device="cuda")
        reference = torch.matmul(q.double(), key.double().transpose(-1, -2))
        out = torch.empty(heads, S, S, device="cuda")
        cublas_us = time_cuda_graph(lambda: torch.matmul(q, key.transpose(-1, -2), out=out), (), args.replays)
        compiled = lamina.compile(scores_product, (q, key))
        lamina_us = time_cuda_graph(compiled, (q, key), args.replays)
        original = backend.emit_cuda
        backend.emit_cuda = lambda kernel: without_stores(original(kernel))
        try:
            storeless = lamina.compile(scores_product, (q, key))
        finally:
            backend.emit_cuda = original
        storeless_us = time_cuda_graph(storeless, (q, key), args.replays)
        print(f"{name}: cuBLAS {cublas_us:.1f} us, lamina as it compiles it {lamina_us:.1f} us "
              f"(error {error(compiled(q, key), reference):.1e}), lamina storing nothing {storeless_us:.1f} us",
              flush=True)
        record["rows"].append({"case": name, "cublas_us": cublas_us, "lamina_us": lamina_us,
                               "lamina_storing_nothing_us": storeless_us})
        buffers = {"a": q.reshape(-1), "b": key.reshape(-1), "c": out.reshape(-1)}
        for bn, sweep, stages, rows_first, a_registers, store in SETTINGS[args.settings]:
            kernel = product_kernel(heads, k, bn, sweep, stages, store, rows_first, a_registers)
            out.fill_(float("nan"))
            kernel(buffers)
            torch.cuda.synchronize()
            err = error(out, reference) if store else float("nan")
            us = time_cuda_graph(lambda: kernel(buffers), (), args.replays)
            row = {"case": name, "block_n": bn, "sweep": sweep, "stages": stages, "rows_first": rows_first,
                   "a_registers": a_registers, "store": store, "us": us,
                   "tflops": 2 * heads * S * S * k / us / 1e6, "error": err,
                   "registers": kernel.compiled.registers, "cublas_us": cublas_us}
            record["rows"].append(row)
            print(f"  128x{bn} sweep {sweep:2d} stages {stages} {'down rows' if rows_first else 'along cols'} "
                  f"{'A in registers' if a_registers else 'A in shared'} "
                  f"{'stored ' if store else 'no store'}: "
                  f"{us:7.1f} us {row['tflops']:5.1f} TFLOP/s error {err:.1e} ({row['registers']} registers)",
                  flush=True)
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

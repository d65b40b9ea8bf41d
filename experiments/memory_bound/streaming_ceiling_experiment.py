"""How close any kernel of the suite's memory-bound sizes gets, cold, to the 4.27 TB/s of a large
copy: hand-written CUDA kernels that negate a float32 tensor of half a case's bytes, in the designs
a streaming kernel can take on Hopper, each timed as ``lamina bench`` times a case cold (a CUDA
graph rotating among input sets that overflow L2), beside the negation lamina emits.

- ``one_vector``: what lamina emits, a block for every 256 vectors of four floats;
- ``stride_U_B``: a grid of ``B`` blocks per SM, each thread loading ``U`` vectors before it
  stores any, looping over the tensor; ``_nc`` loads through the read-only path asking L2 for
  256-byte sectors, ``_cs`` stores with the streaming hint;
- ``bulk_C_S``: the tensor copier (TMA) bringing chunks of ``C`` KiB into shared memory, ``S``
  chunks in flight per block, negated there and written back by the copier;
- ``read_only`` and ``write_only``: the same bytes only read (a sum per block) or only written,
  to see which side a kernel of this size is short on.

Every kernel launches while the previous one finishes (``griddepcontrol``, as lamina's do), and
``one_vector`` and ``stride_4_8`` also launch plainly (``, after``).

    python experiments/memory_bound/streaming_ceiling_experiment.py --out experiments/memory_bound/DATE_GPU_streaming_ceiling.json
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import json
import math
import sys
from pathlib import Path

import torch

from lamina.bench.measure import time_cuda_graph
from lamina.bench.suite import builtin_suite, measured_target
from raw_kernel import OVERLAP_PROLOGUE as PROLOGUE, RawKernel

COPY_CEILING_BYTES_PER_US = 4.27e6
SMS = 132
LARGE_BYTES = (256 << 20,)
LOADS = {"": "__ldg(&x[i])", "_nc": "load_nc256(&x[i])"}
STORES = {"": "y[i] = v", "_cs": "__stcs(&y[i], v)"}
HELPERS = r"""
__device__ __forceinline__ float4 load_nc256(const float4* p) {
  float4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ float4 neg4(float4 v) { return make_float4(-v.x, -v.y, -v.z, -v.w); }
"""


def one_vector_source() -> str:
    return HELPERS + r"""
extern "C" __global__ void __launch_bounds__(256) one_vector(const float4* __restrict__ x, float4* __restrict__ y, long long n4) {
  """ + PROLOGUE + r"""
  long long i = (long long)blockIdx.x * 256 + threadIdx.x;
  if (i < n4) y[i] = neg4(x[i]);
}
"""


def stride_source(name: str, unroll: int, load: str, store: str) -> str:
    return HELPERS + r"""
extern "C" __global__ void __launch_bounds__(256) NAME(const float4* __restrict__ x, float4* __restrict__ y, long long n4) {
  """.replace("NAME", name) + PROLOGUE + r"""
  long long stride = (long long)gridDim.x * 256 * UNROLL;
  for (long long base = (long long)blockIdx.x * 256 * UNROLL + threadIdx.x; base < n4; base += stride) {
    float4 w[UNROLL];
    #pragma unroll
    for (int u = 0; u < UNROLL; ++u) { long long i = base + u * 256; if (i < n4) w[u] = LOAD; }
    #pragma unroll
    for (int u = 0; u < UNROLL; ++u) { long long i = base + u * 256; float4 v = neg4(w[u]); if (i < n4) STORE; }
  }
}
""".replace("UNROLL", str(unroll)).replace("LOAD", load).replace("STORE", store)


def bulk_source(name: str, chunk_floats: int, stages: int) -> str:
    """Chunks of ``chunk_floats`` (the tensor holds a whole number of them), ``stages`` in flight."""
    return r"""
__device__ __forceinline__ unsigned smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
extern "C" __global__ void __launch_bounds__(256) NAME(const float* __restrict__ x, float* __restrict__ y, long long n) {
  extern __shared__ __align__(128) float buffer[];
  __shared__ __align__(8) unsigned long long full[STAGES];
  """.replace("NAME", name).replace("STAGES", str(stages)) + PROLOGUE + r"""
  const long long chunks = n / CHUNK;
  const unsigned bytes = CHUNK * 4;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) asm volatile("mbarrier.init.shared.b64 [%0], 1;" :: "r"(smem(&full[s])));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  long long mine = chunks > blockIdx.x ? (chunks - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  if (threadIdx.x == 0) {
    for (long long k = 0; k < STAGES && k < mine; ++k) {
      long long c = blockIdx.x + k * gridDim.x;
      asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" :: "r"(smem(&full[k])), "r"(bytes) : "memory");
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                   :: "r"(smem(buffer + k * CHUNK)), "l"(x + c * CHUNK), "r"(bytes), "r"(smem(&full[k])) : "memory");
    }
  }
  for (long long k = 0; k < mine; ++k) {
    int s = (int)(k % STAGES);
    unsigned parity = (unsigned)((k / STAGES) & 1);
    asm volatile("{\n .reg .pred done;\n wait:\n mbarrier.try_wait.parity.shared.b64 done, [%0], %1;\n @!done bra wait;\n}"
                 :: "r"(smem(&full[s])), "r"(parity) : "memory");
    float4* chunk = reinterpret_cast<float4*>(buffer + s * CHUNK);
    #pragma unroll
    for (int j = threadIdx.x; j < CHUNK / 4; j += 256) {
      float4 v = chunk[j];
      chunk[j] = make_float4(-v.x, -v.y, -v.z, -v.w);
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x == 0) {
      long long c = blockIdx.x + k * gridDim.x;
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                   :: "l"(y + c * CHUNK), "r"(smem(chunk)), "r"(bytes) : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      if (k >= 1 && k - 1 + STAGES < mine) {
        int r = (int)((k - 1) % STAGES);
        long long next = blockIdx.x + (k - 1 + STAGES) * gridDim.x;
        asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
        asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" :: "r"(smem(&full[r])), "r"(bytes) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     :: "r"(smem(buffer + r * CHUNK)), "l"(x + next * CHUNK), "r"(bytes), "r"(smem(&full[r])) : "memory");
      }
    }
  }
  if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}
""".replace("CHUNK", str(chunk_floats)).replace("STAGES", str(stages))


def read_only_source() -> str:
    return r"""
extern "C" __global__ void __launch_bounds__(256) read_only(const float4* __restrict__ x, float* __restrict__ y, long long n4) {
  """ + PROLOGUE + r"""
  float sum = 0.0f;
  long long stride = (long long)gridDim.x * 256 * 4;
  for (long long base = (long long)blockIdx.x * 256 * 4 + threadIdx.x; base < n4; base += stride) {
    float4 w[4];
    #pragma unroll
    for (int u = 0; u < 4; ++u) { long long i = base + u * 256; w[u] = i < n4 ? __ldg(&x[i]) : make_float4(0, 0, 0, 0); }
    #pragma unroll
    for (int u = 0; u < 4; ++u) sum += w[u].x + w[u].y + w[u].z + w[u].w;
  }
  if (sum == 12345.0f) y[blockIdx.x * 256 + threadIdx.x] = sum;
}
"""


def write_only_source() -> str:
    return r"""
extern "C" __global__ void __launch_bounds__(256) write_only(const float* __restrict__ x, float4* __restrict__ y, long long n4) {
  """ + PROLOGUE + r"""
  float v = x[0];
  long long stride = (long long)gridDim.x * 256;
  for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n4; i += stride) y[i] = make_float4(v, v, v, v);
}
"""


BULK_CHUNK_FLOATS = 4096
"""16 KiB chunks: every tensor below is cut to a whole number of them."""


def designs(floats: int) -> dict[str, tuple[RawKernel, int]]:
    """Each design's kernel and the count it takes (vectors of four, or floats for the copier)."""
    vectors = floats // 4

    def grid(blocks: int) -> tuple[int, int, int]:
        return (blocks, 1, 1)

    found = {"one_vector": (RawKernel(one_vector_source(), "one_vector", grid(math.ceil(vectors / 256))), vectors),
             "one_vector, after": (RawKernel(one_vector_source(), "one_vector", grid(math.ceil(vectors / 256)),
                                             overlapping=False), vectors)}
    for unroll in (1, 4, 8):
        for per_sm in (4, 8, 16):
            for hint in ("", "_nc", "_cs"):
                if hint and (unroll, per_sm) != (4, 8):
                    continue
                name = f"stride_{unroll}_{per_sm}{hint}"
                source = stride_source(name, unroll, LOADS.get(hint, LOADS[""]), STORES.get(hint, STORES[""]))
                blocks = min(SMS * per_sm, math.ceil(vectors / (256 * unroll)))
                found[name] = (RawKernel(source, name, grid(blocks)), vectors)
    found["stride_4_8, after"] = (RawKernel(stride_source("stride_4_8", 4, LOADS[""], STORES[""]), "stride_4_8",
                                            grid(min(SMS * 8, math.ceil(vectors / 1024))), overlapping=False), vectors)
    for stages, per_sm in ((4, 2), (6, 1), (3, 3)):
        name = f"bulk_16_{stages}_{per_sm}"
        found[name] = (RawKernel(bulk_source(name, BULK_CHUNK_FLOATS, stages), name, grid(SMS * per_sm),
                                 shared_bytes=stages * BULK_CHUNK_FLOATS * 4), floats)
    found["read_only"] = (RawKernel(read_only_source(), "read_only", grid(SMS * 8)), vectors)
    found["write_only"] = (RawKernel(write_only_source(), "write_only", grid(SMS * 8)), vectors)
    return found


def measure(bytes_moved: int, replays: int) -> dict:
    floats = max(BULK_CHUNK_FLOATS, bytes_moved // 8 // BULK_CHUNK_FLOATS * BULK_CHUNK_FLOATS)
    moved = floats * 8
    sets = max(2, math.ceil(2 * measured_target().l2_bytes / moved))
    pairs = [(torch.randn(floats, device="cuda"), torch.empty(floats, device="cuda")) for _ in range(sets)]
    row = {"bytes": moved, "sets": sets, "designs": {}}
    for name, (kernel, count) in designs(floats).items():
        x, y = pairs[0]
        y.fill_(float("nan"))
        kernel(x, y, count)
        torch.cuda.synchronize()
        if name not in ("read_only", "write_only") and not torch.equal(y, -x):
            row["designs"][name] = {"wrong": True}
            continue

        def rotate():
            for x, y in pairs:
                kernel(x, y, count)
        us = time_cuda_graph(rotate, (), replays=replays) / sets
        row["designs"][name] = {"cold_us": us, "fraction_of_copy": moved / us / COPY_CEILING_BYTES_PER_US,
                                "spills": kernel.spills}
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--filter", default="*.s2048.fp32", help="glob over case names")
    parser.add_argument("--replays", type=int, default=100)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("experiments/memory_bound/streaming_ceiling_experiment.py needs a CUDA GPU", file=sys.stderr)
        return 2
    record = {"command": f"python experiments/memory_bound/streaming_ceiling_experiment.py --out experiments/memory_bound/{Path(args.out).name}"
                         f" --filter '{args.filter}' --replays {args.replays}",
              "date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(), "rows": []}
    sizes = {c.name: c.bytes_moved for c in builtin_suite() if c.memory_bound and fnmatch.fnmatch(c.name, args.filter)}
    sizes |= {f"{b >> 20} MiB": b for b in LARGE_BYTES}
    for name, size in sizes.items():
        row = {"name": name, **measure(size, args.replays)}
        record["rows"].append(row)
        best = max((d for d in row["designs"].items() if "cold_us" in d[1] and d[0] not in ("read_only", "write_only")),
                   key=lambda d: d[1]["fraction_of_copy"])
        print(f"{name:32s} {row['bytes'] / 1e6:7.1f} MB, {row['sets']} sets; best {best[0]} "
              f"{best[1]['cold_us']:.2f} us ({best[1]['fraction_of_copy']:.0%})", flush=True)
        for design, figures in row["designs"].items():
            text = "WRONG" if figures.get("wrong") else f"{figures['cold_us']:8.2f} us {figures['fraction_of_copy']:5.0%}"
            print(f"    {design:24s} {text}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Does RoPE come closer to a negation of its bytes when each thread reads its cosines and sines
once for several heads? Hand-written kernels of the suite's RoPE cases, timed cold as
``lamina bench`` times them, beside the kernel lamina emits:

- ``heads_H``: a thread owns one vector of four columns at one position and applies it to ``H``
  heads, loading that vector of ``cos`` and ``sin`` once; ``H = 1`` is lamina's layout written
  by hand;
- ``_shuffled``: the rotated half comes from the lane that loaded it (a warp shuffle) instead
  of a second load of ``q``.

    python experiments/memory_bound/rope_reuse_experiment.py --out experiments/memory_bound/DATE_GPU_rope_reuse.json
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import json
import sys
from pathlib import Path

import torch

import lamina
from lamina.bench.measure import time_cuda_graph
from lamina.bench.runner import _rotating, cold_set_count
from lamina.bench.suite import builtin_suite
from raw_kernel import OVERLAP_PROLOGUE, RawKernel

COPY_CEILING_BYTES_PER_US = 4.27e6
HEADS_PER_THREAD = (1, 2, 4, 7, 8)
"""Those that divide the case's heads are tried."""


def rope_source(name: str, heads: int, positions: int, head_dim: int, per_thread: int, shuffled: bool) -> str:
    vectors = head_dim // 4
    rotated = ("make_float4(__shfl_xor_sync(0xffffffffu, v.x, HALF), __shfl_xor_sync(0xffffffffu, v.y, HALF), "
               "__shfl_xor_sync(0xffffffffu, v.z, HALF), __shfl_xor_sync(0xffffffffu, v.w, HALF))"
               if shuffled else "q[i + (first_half ? HALF : -HALF)]")
    return r"""
extern "C" __global__ void __launch_bounds__(256) NAME(const float4* __restrict__ q, const float4* __restrict__ cos,
                                                       const float4* __restrict__ sin, float4* __restrict__ out) {
  """.replace("NAME", name) + OVERLAP_PROLOGUE + r"""
  const int t = blockIdx.x * 256 + threadIdx.x;
  const bool first_half = t % VECTORS < HALF;
  const float4 c = cos[t], s = sin[t];
  #pragma unroll
  for (int h = blockIdx.y * PER_THREAD; h < (blockIdx.y + 1) * PER_THREAD; ++h) {
    const long long i = (long long)h * ROW_VECTORS + t;
    const float4 v = q[i];
    float4 r = ROTATED;
    if (first_half) r = make_float4(-r.x, -r.y, -r.z, -r.w);
    out[i] = make_float4(v.x * c.x + r.x * s.x, v.y * c.y + r.y * s.y, v.z * c.z + r.z * s.z, v.w * c.w + r.w * s.w);
  }
}
""".replace("ROTATED", rotated).replace("ROW_VECTORS", str(positions * vectors)).replace(
        "VECTORS", str(vectors)).replace("HALF", str(vectors // 2)).replace("PER_THREAD", str(per_thread))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--filter", default="*.rope_q.s2048.fp32", help="glob over case names")
    parser.add_argument("--replays", type=int, default=100)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("experiments/memory_bound/rope_reuse_experiment.py needs a CUDA GPU", file=sys.stderr)
        return 2
    record = {"command": f"python experiments/memory_bound/rope_reuse_experiment.py --out experiments/memory_bound/{Path(args.out).name}"
                         f" --filter '{args.filter}' --replays {args.replays}",
              "date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(), "rows": []}
    for case in builtin_suite():
        if not fnmatch.fnmatch(case.name, args.filter):
            continue
        sets = max(1, cold_set_count(case))
        rotation = [case.program().example_inputs(seed=k, device="cuda") for k in range(sets)]
        q = rotation[0][0]
        _, heads, positions, head_dim = q.shape
        reference = case.program().function()(*rotation[0])
        compiled = lamina.compile(case.program().function(), rotation[0])
        figures = {"lamina": time_cuda_graph(_rotating(compiled, rotation), (), replays=args.replays) / sets}
        outputs = [torch.empty_like(inputs[0]) for inputs in rotation]
        for per_thread in (p for p in HEADS_PER_THREAD if heads % p == 0):
            for shuffled in (False, True):
                name = f"heads_{per_thread}" + ("_shuffled" if shuffled else "")
                source = rope_source(name, heads, positions, head_dim, per_thread, shuffled)
                kernel = RawKernel(source, name, (positions * head_dim // 4 // 256, heads // per_thread, 1))
                kernel(*rotation[0], outputs[0])
                error = ((outputs[0] - reference).abs().max() / reference.abs().max()).item()
                if error > 1e-5:
                    figures[name] = f"wrong ({error:.1e})"
                    continue

                def rotate():
                    for inputs, out in zip(rotation, outputs):
                        kernel(*inputs, out)
                figures[name] = time_cuda_graph(rotate, (), replays=args.replays) / sets
        record["rows"].append({"name": case.name, "sets": sets, "bytes": case.bytes_moved, "cold_us": figures})
        print(f"{case.name} ({sets} sets, {case.bytes_moved / 1e6:.1f} MB)", flush=True)
        for name, us in figures.items():
            text = us if isinstance(us, str) else f"{us:8.2f} us {case.bytes_moved / us / COPY_CEILING_BYTES_PER_US:5.0%}"
            print(f"    {name:20s} {text}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

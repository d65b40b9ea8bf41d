"""Whether the attention scores at S = 2048 gain from one kernel in which the last block to
finish a band of rows takes their softmax, reading the scores back from L2.

lamina runs these scores as two kernels: the product writes the scores to memory, and the
softmax reads them back and writes the probabilities, 1.6 GB of memory traffic for
TinyLlama's. In one kernel whose clusters hold whole rows, the blocks of a cluster wait for
each other and clusters of 16 fill the SMs poorly (``wgmma_rows_experiment.py``). Here no
block waits: each block of the product stores its scores, fences them and counts itself
done for its band of rows (one global counter per band); the block that finds itself the
band's last reads the band's scores back, still in L2, and writes their softmax in place,
so the scores need not reach memory before the probabilities overwrite them. The counter is
reset by that last block, ready for the next call.

``python last_block_softmax_experiment.py lamina`` times the schedule that lamina builds from
this (``contraction_rows/last_block.py``) against its other ways with these scores, and
``python last_block_softmax_experiment.py lamina causal`` the suite's causal scores at S = 2048.

This edits the CUDA that lamina emits for the product alone (``q k^T * scale``): the blocks
take the bands row by row (``row-major``) or as emitted (column by column within a head),
and the tail above is added to the kernel. Each variant is checked against float64 and timed
by CUDA-graph replay beside lamina's two kernels. Run on the GPU:

    python benchmarks/last_block_softmax_experiment.py > results.txt

``python last_block_softmax_experiment.py MODEL VARIANT`` calls one variant of ``PROFILED``
three times, for Nsight Compute (the command is in the results file).
"""

import re
import sys

import torch

from edited_cuda import compiled_with_edit

import lamina
from lamina.bench.measure import float64_reference, relative_error, time_cuda_graph

MODELS = {"tinyllama": (32, 64), "qwen": (28, 128)}
S = 2048
BANDS = re.compile(r"  int block_row = .*;\n  int block_col = .*;\n")
SCORE_STORE = re.compile(r"\*reinterpret_cast<uint2\*>\((&\w+\[[^;]*\])\) = \*reinterpret_cast<const uint2\*>\((&\w+\[0\])\);")
EVICT_LAST_STORE = """
__device__ __forceinline__ void lamina_store_evict_last(float* to, const float* from) {
  unsigned long long policy;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  asm volatile("st.global.L2::cache_hint.v2.f32 [%0], {%1, %2}, %3;" :: "l"(to), "f"(from[0]), "f"(from[1]), "l"(policy) : "memory");
}

"""
BLOCK_SIZES = re.compile(r"int row = block_row \* (?P<m>\d+) .*\n  int col = block_col \* (?P<n>\d+) ")
KERNEL = re.compile(r"(extern \"C\" __global__ void __launch_bounds__\(\d+\) \w+\(.*float\* __restrict__ (?P<out>\w+)\) \{)")

TAIL = """
  __shared__ int lamina_last_of_band;
  __threadfence();
  __syncthreads();
  if (tid == 0) {
    unsigned* counter = &lamina_band_counters[batch * BAND_COUNT + block_row];
    const unsigned done = atomicAdd(counter, 1u);
    lamina_last_of_band = done == BLOCKS_PER_BAND - 1;
    if (lamina_last_of_band) *counter = 0u;
  }
  __syncthreads();
  if (!lamina_last_of_band || COUNT_ONLY) return;
  __threadfence();
  float* band = &OUTPUT[batch * LENGTH * LENGTH + block_row * BLOCK_M * LENGTH];
  const int lane = tid % 32, warps = (int)(blockDim.x * blockDim.y) / 32;
  for (int r = tid / 32; r < BLOCK_M; r += warps) {
    float4 v[LENGTH / 128];
    float4* line = reinterpret_cast<float4*>(band + r * LENGTH);
    #pragma unroll
    for (int j = 0; j < LENGTH / 128; ++j) v[j] = __ldcg(line + j * 32 + lane);
    float m = -__int_as_float(0x7f800000);
    #pragma unroll
    for (int j = 0; j < LENGTH / 128; ++j) m = fmaxf(m, fmaxf(fmaxf(v[j].x, v[j].y), fmaxf(v[j].z, v[j].w)));
    #pragma unroll
    for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float s = 0.0f;
    #pragma unroll
    for (int j = 0; j < LENGTH / 128; ++j) {
      v[j].x = expf(v[j].x - m); v[j].y = expf(v[j].y - m); v[j].z = expf(v[j].z - m); v[j].w = expf(v[j].w - m);
      s += (v[j].x + v[j].y) + (v[j].z + v[j].w);
    }
    #pragma unroll
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float inverse = 1.0f / s;
    #pragma unroll
    for (int j = 0; j < LENGTH / 128; ++j) {
      v[j].x *= inverse; v[j].y *= inverse; v[j].z *= inverse; v[j].w *= inverse;
      FINAL_STORE;
    }
  }
}
"""


def scores(q, k):
    return torch.softmax(q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5, -1)


def causal_scores(q, k):
    """The suite's causal scores: the mask from positions, which the schedule reads off the coordinates."""
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).triu(1)
    return torch.softmax((q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5).masked_fill(mask, float("-inf")), -1)


def product(q, k):
    return q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5


def last_block_softmax(heads: int, row_major: bool, count_only: bool = False, streamed: bool = False,
                       scores_kept: bool = False):
    """The edit that adds the band's tail to the product's kernel: its blocks taking the bands row
    by row where ``row_major``; only counting the blocks, no softmax, where ``count_only``; the
    probabilities stored evict-first (``__stcs``) where ``streamed``; the scores stored with an
    evict-last L2 policy where ``scores_kept``."""

    def edit(source: str) -> str:
        sizes = BLOCK_SIZES.search(source)
        if sizes is None or not BANDS.search(source):
            return source
        block_m, block_n = int(sizes["m"]), int(sizes["n"])
        bands, per_band = S // block_m, S // block_n
        if row_major:
            order = (f"  const int lamina_block = (int)blockIdx.y * (int)gridDim.x + (int)blockIdx.x;\n"
                     f"  int block_row = lamina_block / {per_band};\n  int block_col = lamina_block % {per_band};\n")
            source = BANDS.sub(order, source)
        output = KERNEL.search(source)["out"]
        final_store = "__stcs(line + j * 32 + lane, v[j])" if streamed else "line[j * 32 + lane] = v[j]"
        if scores_kept:
            source, stores = SCORE_STORE.subn(r"lamina_store_evict_last(\1, \2);", source)
            assert stores, "no store of the scores was marked evict-last"
        values = {"FINAL_STORE": final_store, "COUNT_ONLY": str(count_only).lower(), "OUTPUT": output,
                  "BAND_COUNT": str(bands), "BLOCKS_PER_BAND": str(per_band), "LENGTH": str(S),
                  "BLOCK_M": str(block_m)}
        tail = TAIL
        for name, value in values.items():
            tail = tail.replace(name, value)
        source = KERNEL.sub(f"__device__ unsigned lamina_band_counters[{heads * bands}];\n{EVICT_LAST_STORE}\\1", source)
        source = source.rstrip()
        assert source.endswith("}")
        return source[:-1] + tail

    return edit


def compiled_with(edit, fn, inputs, knobs):
    compiled, out, edited = compiled_with_edit(edit, fn, inputs, knobs)
    assert edited, "the product's kernel was not edited"
    return compiled, out


def profile(model: str, label: str):
    """One variant called three times, for Nsight Compute."""
    heads, d = MODELS[model]
    knobs, row_major, count_only = PROFILED[label]
    q, k = (torch.randn(1, heads, S, d, device="cuda") for _ in range(2))
    compiled, _ = compiled_with(last_block_softmax(heads, row_major, count_only), product, (q, k), knobs)
    for _ in range(2):
        compiled(q, k)
    torch.cuda.synchronize()


VARIANTS = {
    "row-major": ({}, dict(row_major=True)),
    "as emitted": ({}, dict(row_major=False)),
    "row-major, probabilities streamed": ({}, dict(row_major=True, streamed=True)),
    "row-major, scores evict-last, probabilities streamed": ({}, dict(row_major=True, streamed=True, scores_kept=True)),
    "row-major 64x128": ({"block_m": 64, "block_n": 128}, dict(row_major=True)),
    "row-major 64x128, scores evict-last, probabilities streamed":
        ({"block_m": 64, "block_n": 128}, dict(row_major=True, streamed=True, scores_kept=True)),
    "row-major 64x64, scores evict-last, probabilities streamed":
        ({"block_m": 64, "block_n": 64}, dict(row_major=True, streamed=True, scores_kept=True)),
}
PROFILED = {"row-major": ({}, True, False), "row-major 64x128": ({"block_m": 64, "block_n": 128}, True, False),
            "counting only": ({}, True, True)}


LAMINA_SETTINGS = {
    "as compiled": {},
    "last block pinned": {"knobs": {"last_block": 1}},
    "clusters pinned": {"knobs": {"last_block": 0}},
    "two kernels": {"disable": ("lamina.builtin.schedules.contraction_rows",)},
}
"""lamina's own schedule, once built in: as the model chooses, with the band's last block or
clusters pinned (``last_block``), and the product and the softmax apart."""


def lamina_settings(programs=(scores,), lengths=(1024, 2048)):
    """The suite's ``programs`` at each of ``lengths`` in each of ``LAMINA_SETTINGS``, one line each."""
    for fn in programs:
        for model, (heads, d) in MODELS.items():
            for length in lengths:
                lamina_line(fn, model, heads, d, length)


def lamina_line(fn, model: str, heads: int, d: int, length: int):
    q, k = (torch.randn(1, heads, length, d, device="cuda") for _ in range(2))
    reference = float64_reference(fn, (q, k))
    line = [f"{model} {fn.__name__} S={length}:"]
    for name, settings in LAMINA_SETTINGS.items():
        compiled = lamina.Compiler(**settings).compile(fn, (q, k))
        error = relative_error(compiled(q, k), reference)
        tiles = compiled.specialization((q, k)).compilation.tiles
        how = "+".join(t.schedule if t.schedule != "contraction_rows" else
                       f"contraction_rows {t.reduction.strategy}" for t in tiles)
        us = time_cuda_graph(compiled, (q, k), replays=50)
        line.append(f"| {name}: {us:.1f} us ({how}, error {error:.1e})")
    print(" ".join(line), flush=True)


def main():
    if sys.argv[1:] == ["lamina"]:
        return lamina_settings()
    if sys.argv[1:] == ["lamina", "causal"]:
        return lamina_settings((causal_scores,), (2048,))
    if len(sys.argv) == 3:
        return profile(*sys.argv[1:])
    torch.manual_seed(0)
    for model, (heads, d) in MODELS.items():
        q, k = (torch.randn(1, heads, S, d, device="cuda") for _ in range(2))
        reference = float64_reference(scores, (q, k))
        line = [f"{model}:"]
        whole = lamina.compile(scores, (q, k))
        error = relative_error(whole(q, k), reference)
        line.append(f"two kernels {time_cuda_graph(whole, (q, k), replays=50):.1f} us (error {error:.1e})")
        alone = lamina.compile(product, (q, k))
        line.append(f"the product alone {time_cuda_graph(alone, (q, k), replays=50):.1f} us")
        for label, (knobs, options) in VARIANTS.items():
            compiled, out = compiled_with(last_block_softmax(heads, **options), product, (q, k), knobs)
            error = relative_error(out, reference)
            again = relative_error(compiled(q, k), reference)
            us = time_cuda_graph(compiled, (q, k), replays=50)
            line.append(f"last block's softmax, {label} {us:.1f} us (error {error:.1e}, again {again:.1e})")
        print(" | ".join(line), flush=True)


if __name__ == "__main__":
    main()

"""Whether attention scores at S = 2048 gain from running the product and the softmax a few
heads at a time, so that the scores between them stay in L2 instead of going to memory.

For each shape it times, by CUDA-graph replay (``lamina.bench.measure.time_cuda_graph``):
lamina's program as it compiles (the product and the softmax over all heads), and the
same two lamina kernels compiled for a chunk of heads and called chunk by chunk, the
scores of each chunk written to a buffer that the next chunk reuses. Run on the GPU:

    python experiments/attention_scores/l2_chunking_experiment.py > results.txt
"""

import torch

import lamina
from lamina.bench.measure import float64_reference, relative_error, time_cuda_graph

SHAPES = {"tinyllama": (32, 64), "qwen": (28, 128)}
S = 2048


def scores(q, k):
    return torch.softmax(q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5, -1)


def product(q, k):
    return q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5


def softmax(s):
    return torch.softmax(s, -1)


def main():
    torch.manual_seed(0)
    for model, (heads, d) in SHAPES.items():
        q = torch.randn(1, heads, S, d, device="cuda")
        k = torch.randn(1, heads, S, d, device="cuda")
        whole = lamina.compile(scores, (q, k))
        print(f"{model}: whole {time_cuda_graph(whole, (q, k), replays=50):.1f} us "
              f"({len(whole.compilation.tiles)} kernels)", flush=True)
        all_product = lamina.compile(product, (q, k))
        print(f"{model}: the product alone {time_cuda_graph(all_product, (q, k), replays=50):.1f} us", flush=True)
        for chunk in (1, 2, 4, 7 if heads % 7 == 0 else 8):
            if heads % chunk:
                continue
            qc, kc = q[:, :chunk].contiguous(), k[:, :chunk].contiguous()
            chunk_product = lamina.compile(product, (qc, kc))
            chunk_softmax = lamina.compile(softmax, (chunk_product(qc, kc),))
            out = torch.empty(1, heads, S, S, device="cuda")

            def chunked(q, k):
                for first in range(0, heads, chunk):
                    s = chunk_product(q[:, first:first + chunk], k[:, first:first + chunk])
                    out[:, first:first + chunk] = chunk_softmax(s)
                return out

            def chunked_no_copy(q, k):
                return [chunk_softmax(chunk_product(q[:, f:f + chunk], k[:, f:f + chunk]))
                        for f in range(0, heads, chunk)]

            error = relative_error(chunked(q, k)[:, :2], float64_reference(scores, (q[:, :2], k[:, :2])))
            t_copy = time_cuda_graph(chunked, (q, k), replays=50)
            t = time_cuda_graph(chunked_no_copy, (q, k), replays=50)
            print(f"{model}: chunks of {chunk} heads: {t:.1f} us, each chunk's output a new tensor; "
                  f"{t_copy:.1f} us copied into one output; error {error:.1e}", flush=True)


if __name__ == "__main__":
    main()

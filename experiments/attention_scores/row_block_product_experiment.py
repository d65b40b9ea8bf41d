"""How fast the attention scores' product runs in blocks that span whole rows of 2048 columns.

One kernel for ``softmax(q k^T * scale)`` at S = 2048 needs a block to hold whole rows
(2048 scores each) in its registers, which means blocks of 16 or 32 rows that each read
all of K. Before building that schedule, this times the product alone (``q k^T * scale``,
stored) with the contraction's knobs pinned to such blocks, beside the default blocks and
beside lamina's two kernels for the whole scores. If the product in whole-row blocks is
not close to the default product, one kernel cannot beat two. Run on the GPU:

    python experiments/attention_scores/row_block_product_experiment.py > results.txt
"""

import torch

import lamina
from lamina.bench.measure import float64_reference, relative_error, time_cuda_graph

SHAPES = {"tinyllama": (32, 64), "qwen": (28, 128)}
S = 2048
SETTINGS = [
    {},
    dict(block_m=16, block_n=2048, thread_m=8, thread_n=16, block_k=8, warp_columns=32),
    dict(block_m=16, block_n=2048, thread_m=4, thread_n=16, block_k=8, warp_columns=32),
    dict(block_m=16, block_n=1024, thread_m=8, thread_n=8, block_k=8, warp_columns=32),
    dict(block_m=32, block_n=1024, thread_m=8, thread_n=16, block_k=8, warp_columns=32),
]


def scores(q, k):
    return torch.softmax(q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5, -1)


def product(q, k):
    return q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5


def main():
    torch.manual_seed(0)
    for model, (heads, d) in SHAPES.items():
        q = torch.randn(1, heads, S, d, device="cuda")
        k = torch.randn(1, heads, S, d, device="cuda")
        whole = lamina.compile(scores, (q, k))
        print(f"{model}: scores, two kernels {time_cuda_graph(whole, (q, k), replays=50):.1f} us", flush=True)
        print(f"{model}: product, eager (cuBLAS, then the scale) {time_cuda_graph(product, (q, k), replays=50):.1f} us",
              flush=True)
        reference = float64_reference(product, (q, k))
        for knobs in SETTINGS:
            try:
                compiled = lamina.Compiler(knobs=knobs).compile(product, (q, k))
            except lamina.LaminaError as error:
                print(f"{model}: product {knobs}: {error}", flush=True)
                continue
            error = relative_error(compiled(q, k), reference)
            us = time_cuda_graph(compiled, (q, k), replays=50)
            print(f"{model}: product {knobs or 'default'} {us:.1f} us, error {error:.1e}", flush=True)


if __name__ == "__main__":
    main()

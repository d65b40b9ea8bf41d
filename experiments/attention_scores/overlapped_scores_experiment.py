"""Whether attention scores at S = 2048 gain from overlapping the product of some heads with the
softmax of others, on two streams.

lamina runs the scores as two kernels one after the other: the product, bound by its
arithmetic and the latency of its k-tiles (it takes the same time storing nothing,
``experiments/tensor_cores/RESULTS.md``), then the softmax, bound by memory. Run a chunk of
heads at a time, the product of one chunk can run beside the softmax of the chunk before,
each using what the other leaves idle. This times, by CUDA-graph replay
(``lamina.bench.measure.time_cuda_graph``): lamina's program as it compiles; lamina's two
kernels compiled for a chunk of heads and called chunk by chunk on one stream; and the same
with each chunk's softmax on a second stream, after an event that its product recorded, so
that it overlaps the next chunk's product. Each is checked against a float64 reference first.
Run on the GPU:

    python experiments/attention_scores/overlapped_scores_experiment.py > results.txt
"""

import torch
from l2_chunking_experiment import SHAPES, S, product, scores, softmax

import lamina
from lamina.bench.measure import float64_reference, relative_error, time_cuda_graph

CHUNKS = (2, 4, 7, 8, 16)
"""Heads per chunk, where they divide the heads."""


def chunked(chunk_product, chunk_softmax, heads: int, chunk: int, side: torch.cuda.Stream | None):
    """The scores chunk by chunk, each chunk's softmax on ``side`` where given."""

    def run(q, k):
        main = torch.cuda.current_stream()
        if side is not None:
            side.wait_stream(main)
        kept, outputs = [], []
        for first in range(0, heads, chunk):
            s = chunk_product(q[:, first:first + chunk], k[:, first:first + chunk])
            kept.append(s)
            if side is None:
                outputs.append(chunk_softmax(s))
                continue
            done = torch.cuda.Event()
            done.record(main)
            with torch.cuda.stream(side):
                side.wait_event(done)
                outputs.append(chunk_softmax(s))
        if side is not None:
            main.wait_stream(side)
        return outputs

    return run


def main():
    torch.manual_seed(0)
    side = torch.cuda.Stream()
    for model, (heads, d) in SHAPES.items():
        q = torch.randn(1, heads, S, d, device="cuda")
        k = torch.randn(1, heads, S, d, device="cuda")
        reference = float64_reference(scores, (q, k))
        whole = lamina.compile(scores, (q, k))
        print(f"{model}: lamina's program {time_cuda_graph(whole, (q, k), replays=50):.1f} us "
              f"({len(whole.compilation.tiles)} kernels), error {relative_error(whole(q, k), reference):.1e}",
              flush=True)
        for chunk in CHUNKS:
            if heads % chunk:
                continue
            qc, kc = q[:, :chunk].contiguous(), k[:, :chunk].contiguous()
            chunk_product = lamina.compile(product, (qc, kc))
            chunk_softmax = lamina.compile(softmax, (chunk_product(qc, kc),))
            line = [f"{model}: chunks of {chunk:2d} heads:"]
            for label, stream in (("one stream", None), ("softmax on a second stream", side)):
                run = chunked(chunk_product, chunk_softmax, heads, chunk, stream)
                out = torch.cat(run(q, k), 1)
                torch.cuda.synchronize()
                error = relative_error(out, reference)
                line.append(f"{label} {time_cuda_graph(run, (q, k), replays=50):.1f} us (error {error:.1e})")
            print(" | ".join(line), flush=True)


if __name__ == "__main__":
    main()

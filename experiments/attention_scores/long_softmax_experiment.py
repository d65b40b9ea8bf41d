"""How fast the softmax of the attention scores at S = 2048 runs with the row-reduction schedule's
knobs pinned, beside a copy of as many bytes.

The plain scores at S = 2048 are the product and this softmax, which reads and writes the
scores once (0.94 and 1.07 GB). This times, by CUDA-graph replay
(``lamina.bench.measure.time_cuda_graph``), the softmax of random scores as lamina compiles it,
with each setting of ``SETTINGS`` pinned, eager PyTorch's, and ``copy_`` of the same bytes,
each checked against PyTorch first. Run on the GPU:

    python experiments/attention_scores/long_softmax_experiment.py > results.txt
"""

import torch

import lamina
from lamina.bench.measure import time_cuda_graph

SHAPES = {"tinyllama": 32, "qwen": 28}
"""Heads of each model's attention; the scores are (1, heads, 2048, 2048)."""
S = 2048
SETTINGS = [{}, {"threads": 128}, {"threads": 256}, {"threads": 512}, {"threads": 1024}, {"rows_per_block": 2, "threads": 256},
            {"vector_width": 8}, {"row_in_registers": False}]


def softmax(s):
    return torch.softmax(s, -1)


def main():
    torch.manual_seed(0)
    for model, heads in SHAPES.items():
        s = torch.randn(1, heads, S, S, device="cuda")
        gigabytes = 2 * s.numel() * s.element_size() / 1e9
        out = torch.empty_like(s)
        copy_us = time_cuda_graph(lambda: out.copy_(s), (), replays=50)
        eager_us = time_cuda_graph(softmax, (s,), replays=50)
        print(f"{model}: copy_ {copy_us:.1f} us ({gigabytes / copy_us * 1e3:.2f} TB/s), eager {eager_us:.1f} us",
              flush=True)
        reference = softmax(s)
        for knobs in SETTINGS:
            try:
                compiled = lamina.Compiler(knobs=knobs).compile(softmax, (s,))
            except lamina.LaminaError as error:
                print(f"  {knobs}: not compiled ({error})", flush=True)
                continue
            error = (compiled(s) - reference).abs().max().item()
            us = time_cuda_graph(compiled, (s,), replays=50)
            print(f"  {knobs or 'as chosen'}: {us:.1f} us ({gigabytes / us * 1e3:.2f} TB/s), max abs difference "
                  f"{error:.1e}", flush=True)


if __name__ == "__main__":
    main()

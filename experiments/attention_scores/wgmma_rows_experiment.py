"""How fast the attention scores' softmax runs in one kernel with its products on wgmma, against
the same kernel on the CUDA cores and against the product and the softmax as two kernels.

For each model's heads and head size, scores ``softmax(q k^T / sqrt(d))`` of S x S are compiled
with the ``matmul_row_reduction`` schedule's products pinned to the CUDA cores (``products = "fma"``,
rows up to 1024 columns) or to wgmma (``products = "wgmma"``, in 64- and 128-row blocks), and with
the ``matmul_row_reduction`` plugin disabled (the contraction on wgmma, then the softmax). Each is
checked against float64 and timed by CUDA-graph replay (``lamina.bench.measure.time_cuda_graph``),
the schedules it ran and the block chosen printed beside its time.
Run on the GPU:

    python experiments/attention_scores/wgmma_rows_experiment.py > results.txt
"""

import torch

import lamina
from lamina.bench.measure import float64_reference, relative_error, time_cuda_graph

MODELS = {"tinyllama": (32, 64), "qwen": (28, 128)}
"""Heads and head size of each model's attention."""
LENGTHS = (128, 256, 512, 1024, 2048)
SETTINGS = {
    "CUDA cores": {"knobs": {"matmul_row_reduction.products": "fma"}},
    "wgmma": {"knobs": {"matmul_row_reduction.products": "wgmma"}},
    **{f"wgmma {m}x{n}": {"knobs": {"matmul_row_reduction": {"products": "wgmma", "block_m": m, "block_n": n}}}
       for m in (64, 128) for n in (64, 128)},
    "two kernels": {"disable": ("lamina.builtin.schedules.matmul_row_reduction",)},
}
"""``wgmma``: the block the cost model chooses; ``wgmma M x N``: each block pinned."""
SHORT = 512
"""Scores up to this long are timed 20 calls to a graph, per call, as ``lamina bench`` times
its small cases, so that the graph's launch does not hide them."""


def scores(q, k):
    return torch.softmax(q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5, -1)


def main():
    torch.manual_seed(0)
    for model, (heads, d) in MODELS.items():
        for length in LENGTHS:
            q, k = (torch.randn(1, heads, length, d, device="cuda") for _ in range(2))
            reference = float64_reference(scores, (q, k))
            line = [f"{model} S={length}:"]
            for name, settings in SETTINGS.items():
                try:
                    compiled = lamina.Compiler(**settings).compile(scores, (q, k))
                    out = compiled(q, k)
                except lamina.LaminaError as error:
                    line.append(f"| {name}: not compiled ({str(error).splitlines()[0][:80]})")
                    continue
                tiles = compiled.specialization((q, k)).compilation.tiles
                schedules = "+".join(t.schedule for t in tiles)
                chosen = dict(tiles[0].knobs)["chosen"].split(",")[0] if schedules == "matmul_row_reduction" else ""
                schedules += f" {chosen}" if chosen else ""
                us = time_cuda_graph(compiled, (q, k), replays=50, calls_per_graph=20 if length <= SHORT else 1)
                line.append(f"| {name}: {us:.1f} us ({schedules}, error {relative_error(out, reference):.1e})")
            print(" ".join(line), flush=True)


if __name__ == "__main__":
    main()

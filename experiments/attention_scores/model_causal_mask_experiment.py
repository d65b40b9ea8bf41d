"""What computing a model's causal mask from coordinates gains in its prefill.

Transformers builds a decoder's causal mask from its position ids, with indexing and
cumulative sums that lamina folds into a boolean constant at capture. Read from memory, the
mask tells no kernel which scores it replaces. Recognised as the triangle it is
(``frontends/torch/folding.triangle_of``), it is computed from coordinates, and the
attention's score product skips the blocks above the diagonal and stores nothing there.
This compiles the first layers of a model both ways in one process (the recognition turned
off by replacing ``triangle_of``), checks the logits against eager PyTorch, and times each
by CUDA-graph replay (median):

    python experiments/attention_scores/model_causal_mask_experiment.py --model tinyllama --layers 2 --seq 2048
"""

import argparse

import torch

import lamina
from lamina.bench.measure import relative_error, time_cuda_graph
from lamina.frontends.torch import folding
from lamina.models import model_config
from lamina.models.builder import build_model, random_input_ids

VARIANTS = ("mask read from memory", "mask from coordinates", "mask read from memory again")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tinyllama")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--replays", type=int, default=20)
    args = parser.parse_args()
    config = model_config(args.model)
    ids = random_input_ids(config, args.seq, device="cuda")
    model = build_model(config, num_layers=args.layers, dtype=torch.float32, device="cuda", seed=0)
    with torch.no_grad():
        expected = model(ids).double()
    recognise = folding.triangle_of
    print(f"{args.model}, {args.layers} layers, S = {args.seq}, fp32")
    for variant in VARIANTS:
        folding.triangle_of = recognise if variant == "mask from coordinates" else (lambda value: None)
        compiled = lamina.compile(model, (ids,))
        error = relative_error(compiled(ids), expected)
        us = time_cuda_graph(compiled, (ids,), replays=args.replays)
        skipping = sum("needed_k_tiles" in s for s in compiled.compilation.sources.values())
        print(f"  {variant:28s} {us:10.1f} us  error {error:.1e}  {compiled.kernel_count} kernels, "
              f"{skipping} skipping blocks")
    folding.triangle_of = recognise


if __name__ == "__main__":
    main()

"""A layer's query, key and value projections as lamina compiles them (``join_products_of_one_input``
joins them where the cost model expects enough to gain), joined whatever it expects (at its setting
and at two pinned ones), compiled apart (each at the cost model's choice, split-K included), and
through torch.compile (cuBLAS), at the shapes of the models' prefill.

    python experiments/joined_projections/time_projections.py [WORD ...]

With words, only the shapes whose name holds one of them.
Writes ``projections.json`` under ``$OUT`` (or here). Each figure is the median CUDA-graph replay
of a graph of 20 calls, per call."""
import json
import os
import sys

import torch
import torch.nn.functional as F

os.environ["LAMINA_PROGRAM_CACHE"] = "0"  # the forced joins below compile the same programs otherwise
import lamina  # noqa: E402
from lamina.bench.measure import time_cuda_graph  # noqa: E402
from lamina.plugins.schedules.contraction.wgmma_tma import joined_products  # noqa: E402

SHAPES = {
    "TinyLlama, 512 tokens: 2048 -> 2048, 256, 256": (512, 2048, (2048, 256, 256), False),
    "Qwen2.5-7B, 512 tokens: 3584 -> 3584, 512, 512, biases": (512, 3584, (3584, 512, 512), True),
    "Qwen2.5-7B's keys and values alone: 3584 -> 512, 512, biases": (512, 3584, (512, 512), True),
    "Mistral-7B, 512 tokens: 4096 -> 4096, 1024, 1024": (512, 4096, (4096, 1024, 1024), False),
    "Mistral-7B's keys and values alone: 4096 -> 1024, 1024": (512, 4096, (1024, 1024), False),
    "BERT-base, 8 x 128 tokens: 768 -> 768 x 3, biases": (1024, 768, (768, 768, 768), True),
}
"""Rows, features, each product's columns, whether each has a bias."""


def projections(x, *weights):
    return tuple(F.linear(x, w) for w in weights)


def biased(x, *weights_and_biases):
    half = len(weights_and_biases) // 2
    return tuple(F.linear(x, w, b) for w, b in zip(weights_and_biases[:half], weights_and_biases[half:]))


FORCED = {
    "joined at the cost model's setting": {},
    "joined, 128 x 128 on 2 consumer warpgroups": {"block_m": 128, "block_n": 128, "consumer_warpgroups": 2, "stages": 4},
    "joined, 128 x 128 on 1 consumer warpgroup": {"block_m": 128, "block_n": 128, "consumer_warpgroups": 1, "stages": 4},
}
"""Joins forced (whatever share of the time apart the cost model expects), at these pins."""


def pieces(compiled) -> list[int]:
    return [len(getattr(t.settings, "pieces", ())) for t in compiled.compilation.tiles if t.schedule == "contraction"]


def _forced_us(program, args, pins) -> tuple[list[int], float]:
    """The pieces of the products' kernels where the rule joins every product it may, under ``pins``,
    and their time."""
    kept, joined_products.JOINED_SHARE = joined_products.JOINED_SHARE, 100.0
    try:
        compiled = lamina.compile(program, args, knobs={"contraction": pins})
    finally:
        joined_products.JOINED_SHARE = kept
    return pieces(compiled), time_cuda_graph(compiled, args, calls_per_graph=20)


def main() -> None:
    torch.manual_seed(0)
    results = {}
    chosen_shapes = {name: shape for name, shape in SHAPES.items()
                     if len(sys.argv) == 1 or any(word in name for word in sys.argv[1:])}
    for name, (rows, features, columns, bias) in chosen_shapes.items():
        x = torch.randn(rows, features, device="cuda", dtype=torch.bfloat16)
        ws = [torch.randn(n, features, device="cuda", dtype=torch.bfloat16) * features ** -0.5 for n in columns]
        bs = [torch.randn(n, device="cuda", dtype=torch.bfloat16) for n in columns] if bias else []
        program = biased if bias else projections
        args = (x, *ws, *bs)
        joined = lamina.compile(program, args)
        chosen = [dict(t.knobs)["chosen"].split(";")[0] for t in joined.compilation.tiles if t.schedule == "contraction"]
        apart = [lamina.compile(program, (x, w, *([b] if bias else []))) for w, b in zip(ws, bs or ws)]

        def each(x, *weights_and_biases):
            half = len(ws)
            return tuple(f(x, w, *([b] if bias else [])) for f, w, b in
                         zip(apart, weights_and_biases[:half], weights_and_biases[half:] or weights_and_biases))

        inductor = torch.compile(program)
        for got, want in zip(joined(*args), program(*args)):
            torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
        results[name] = {
            "pieces": pieces(joined),
            "settings": chosen,
            "lamina_us": time_cuda_graph(joined, args, calls_per_graph=20),
            **{f"{label}: pieces, us": _forced_us(program, args, pins) for label, pins in FORCED.items()},
            "lamina_apart_us": time_cuda_graph(each, args, calls_per_graph=20),
            "torch_compile_us": time_cuda_graph(inductor, args, calls_per_graph=20),
        }
        print(name, results[name], flush=True)
    path = os.path.join(os.environ.get("OUT", os.path.dirname(__file__)), "projections.json")
    with open(path, "w") as out:
        json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "results": results}, out, indent=1)


if __name__ == "__main__":
    main()

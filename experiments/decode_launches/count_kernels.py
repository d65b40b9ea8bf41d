"""The kernels of a decoding step of TinyLlama (static cache, bf16, real sizes) that lamina compiles
for sm_90 from the graphs torch.compile traces on the CPU, each with its schedule; the compiled
programs are not run on a GPU (the graphs run in PyTorch on the CPU, greedy, a few tokens).

    python experiments/decode_launches/count_kernels.py [LAYERS]

Kernels a layer: the count at LAYERS + 1 less the count at LAYERS. On the CPU, PyTorch hands a
backend attention as three kernels' worth of ops (on CUDA, the fused attention op, which lamina
makes one kernel). The graphs keep the cache writes in them, as lamina's backend asks AOTAutograd
to, so that the caches and counters are written in place as in a compiled step.
"""

from __future__ import annotations

import sys

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func

import lamina
from lamina.frontends.torch.fx_graph import fx_to_torch_ir
from lamina.integrations.torch_compile import decompositions
from lamina.models.builder import build_model
from lamina.models.configs import MODELS


def decoding_step_tiles(layers: int):
    """The Tile IR kernels of the decoding step (the second program ``generate`` compiles)."""
    compiler = lamina.Compiler(target="sm_90")
    programs = []

    def forward(graph, graph_inputs):
        captured = fx_to_torch_ir(graph).captured
        if captured.graph.outputs:
            programs.append(compiler.compile_captured(captured, list(graph_inputs)).compilation)
        return make_boxed_func(graph)

    model = build_model(MODELS["tinyllama"], num_layers=layers, dtype=torch.bfloat16).model
    torch._dynamo.reset()
    model.forward = torch.compile(model.forward, backend=aot_autograd(
        fw_compiler=forward, decompositions=decompositions(compiler.keep), keep_inference_input_mutations=True))
    ids = torch.randint(0, 1000, (1, 128))
    with torch.no_grad():
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, min_new_tokens=4,
                       do_sample=False, cache_implementation="static", pad_token_id=0, disable_compile=True)
    return programs[-1].tiles


def main() -> None:
    layers = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    counts = []
    for n in (layers, layers + 1):
        tiles = decoding_step_tiles(n)
        counts.append(len(tiles))
        print(f"{n} layer(s): {len(tiles)} kernels")
        for tile in tiles:
            print(f"  {tile.kernel.name:24s} {tile.schedule}")
    print(f"kernels a layer: {counts[1] - counts[0]}")


if __name__ == "__main__":
    main()

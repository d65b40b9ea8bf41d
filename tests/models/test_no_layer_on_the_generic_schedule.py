"""At their published sizes, in bfloat16 and compiled for the H200 as ``torch.compile(model,
backend="lamina")`` hands lamina the model, no kernel that every layer of an architecture repeats
runs on the generic schedule (one thread per output, its loops serial): a layer's norm or attention
falling there costs the whole model several times over, as the query and key norms of Qwen3 did
before the row reduction took their rotated reads, and T5's softmax did before it took the
position bias that the softmax gathers from a table.

The kernels a model runs once may (``ONCE``). The small CNN has no generic kernel at all: its
global average pooling is a row reduction, its max pooling an unrolled one."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func

import lamina
from lamina.core.ir import tile_ir
from lamina.frontends.torch.fx_graph import fx_to_torch_ir
from lamina.integrations.torch_compile import decompositions
from lamina.models.architectures import ARCHITECTURES, build, example_inputs

ONCE = {
    "opt": 1,
    "mistral": 2,
    "gemma2": 1,
}
"""Generic kernels of a two-layer model that run once: OPT's position ids (a running sum of the
attention mask); the copies of the empty tensors that Mistral's and Gemma-2's caches start from
into the graph's outputs. (The norms that read ViT's and Whisper's embeddings straight from their
convolution, whose channels lie apart along the row, are row reductions.)"""


def kernels_for_sm_90(model: torch.nn.Module, inputs: dict) -> list[tile_ir.TileKernel]:
    """The kernels lamina compiles for the H200 from the graphs that torch.compile gives its
    backend; the graphs themselves run in PyTorch on the CPU."""
    compiler = lamina.Compiler(target="sm_90")
    tiles: list[tile_ir.TileKernel] = []

    def forward(graph: torch.fx.GraphModule, graph_inputs):
        captured = fx_to_torch_ir(graph).captured
        if captured.graph.outputs:
            tiles.extend(compiler.compile_captured(captured, list(graph_inputs)).compilation.tiles)
        return make_boxed_func(graph)

    torch._dynamo.reset()
    backend = aot_autograd(fw_compiler=forward, decompositions=decompositions(compiler.keep))
    with torch.no_grad():
        torch.compile(model, backend=backend, dynamic=False)(**inputs)
    return tiles


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_no_kernel_of_a_layer_runs_on_the_generic_schedule(name):
    arch = ARCHITECTURES[name]
    model = build(arch, size="real", layers=2, dtype=torch.bfloat16, seed=None)  # the kernels depend on shapes alone
    tiles = kernels_for_sm_90(model, example_inputs(arch, model))
    generic = [tile.kernel.name for tile in tiles if tile.schedule == "generic"]
    assert tiles and len(generic) <= ONCE.get(name, 0), generic

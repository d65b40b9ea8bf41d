"""At their published sizes, in bfloat16 and compiled for the H200, no kernel that every layer of an
architecture repeats runs on the generic schedule (one thread per output, its loops serial): a
layer's norm or attention falling there costs the whole model several times over, as the query and
key norms of Qwen3 did before the row reduction took their rotated reads.

The kernels a model runs once may (``ONCE``), and the small CNN's pooling, whose few elements per
output are what one thread per output suits."""

from __future__ import annotations

import pytest
import torch

import lamina
from lamina.models.architectures import ARCHITECTURES, build, example_inputs

ONCE = {
    "opt": 1,
    "vit": 2,
    "whisper-encoder": 1,
}
"""Generic kernels of a two-layer model that run once: OPT's position ids (a running sum of the
attention mask); the norms that read ViT's and Whisper's embeddings straight from their
convolution, whose channels lie strided along the row."""


@pytest.mark.parametrize("name", [name for name in ARCHITECTURES if name != "cnn"])
def test_no_kernel_of_a_layer_runs_on_the_generic_schedule(name):
    arch = ARCHITECTURES[name]
    model = build(arch, size="real", layers=2, dtype=torch.bfloat16)
    compiled = lamina.Compiler(target="sm_90").specialize(model, (), example_kwargs=example_inputs(arch, model))
    generic = [tile.kernel.name for tile in compiled.compilation.tiles if tile.schedule == "generic"]
    assert len(generic) <= ONCE.get(name, 0), generic

"""Scaled-down Llama and Qwen2 (random weights) decompose fully, and their Tensor IR reproduces the logits."""

from __future__ import annotations

import functools

import pytest
import torch

from lamina.core.stages.decompose import decompose, unsupported_ops
from lamina.frontends.torch import DEFAULT_KEEP, capture
from lamina.plugins.ops.plugin import DECOMPOSITIONS
from tests.plugins.ops.lowering import relative_error, run

transformers = pytest.importorskip("transformers")

SMALL = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=128, vocab_size=128, max_position_embeddings=256)


class Logits(torch.nn.Module):
    """The model's forward without a cache, returning its logits."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids, use_cache=False).logits


def build(family: str, attention: str) -> Logits:
    if family == "llama":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMALL, attn_implementation=attention))
    else:
        config = transformers.Qwen2Config(**SMALL, attn_implementation=attention)
        model = transformers.Qwen2ForCausalLM(config)
        assert model.model.layers[0].self_attn.q_proj.bias is not None
    return Logits(model.eval())


@functools.cache
def captured(family: str, attention: str, length: int, fold: bool = True, keep: tuple[str, ...] = DEFAULT_KEEP):
    module = build(family, attention)
    ids = torch.randint(0, SMALL["vocab_size"], (1, length))
    return module, capture(module, (ids,), keep=keep, fold=fold)


def check_logits(family: str, attention: str, length: int, **options) -> None:
    module, graph = captured(family, attention, length, **options)
    assert unsupported_ops(graph.graph, DECOMPOSITIONS) == []
    program = decompose(graph.graph, DECOMPOSITIONS)
    ids = torch.randint(0, SMALL["vocab_size"], (1, length))
    with torch.no_grad():
        expected = module(ids)
    (logits,) = run(graph, program, (ids,))
    assert logits.shape == expected.shape
    assert relative_error(logits, expected) < 1e-4


@pytest.mark.parametrize("length", [13, 32])
@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_sdpa_models_reproduce_eager_logits(family, length):
    check_logits(family, "sdpa", length)


def test_eager_attention_with_the_mask_subgraph_left_unfolded_reproduces_the_logits():
    check_logits("llama", "eager", 13, fold=False)


def test_core_aten_without_kept_composites_reproduces_the_logits():
    check_logits("qwen2", "sdpa", 13, fold=False, keep=())


def test_the_mask_and_rotary_tables_are_folded_and_the_weights_are_not():
    """The causal mask, built from position ids by indexing and cumulative sums, folds into a
    triangle that the graph computes from coordinates; the rotary tables into constants."""
    module, graph = captured("qwen2", "sdpa", 13)
    kinds = {i.name: i.kind for i in graph.graph.inputs}
    state = dict(module.named_parameters())
    assert sum(kind == "parameter" for kind in kinds.values()) == len(state)
    assert [name for name, kind in kinds.items() if kind == "user"] == ["input_ids"]
    assert not any("inv_freq" in name for name in kinds)
    constants = {name: graph.constants[name] for name, kind in kinds.items() if kind == "constant"}
    assert constants and all(c.dtype != torch.bool and c.shape[-1] == 16 for c in constants.values())
    targets = {n.target for n in graph.graph.nodes}
    for folded in ("aten.arange.start_step", "aten.cumsum.default", "aten.index.Tensor", "aten.cos.default"):
        assert folded not in targets
    (tril,) = [n for n in graph.graph.nodes if n.target == "aten.tril.default"]
    assert tril.args[1] == 0 and tril.type.shape == (13, 13)
    assert "aten.scaled_dot_product_attention.default" in targets and "aten.linear.default" in targets

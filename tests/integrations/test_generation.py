"""Generating tokens through ``torch.compile(model.forward, backend="lamina")``, as users do:
``model.generate`` with a static key-value cache, greedy, token for token equal to eager, the
prompt's step and the decoding steps each compiled once (each step's keys and values written
at their positions of the cache: ``index_put``)."""

import pytest
import torch

from lamina.api import Compiler
from lamina.models.architectures import architecture, build

NEW_TOKENS = 8


@pytest.fixture
def compiled_programs(monkeypatch):
    """The programs lamina compiles, each as its kernels' schedules."""
    found: list[list[str]] = []
    original = Compiler.compile_captured

    def counted(self, captured, example_inputs, started=None):
        specialization = original(self, captured, example_inputs, started)
        found.append([tile.schedule for tile in specialization.compilation.tiles])
        return specialization

    monkeypatch.setattr(Compiler, "compile_captured", counted)
    return found


@pytest.mark.parametrize("name", ["llama", "qwen2"])
@pytest.mark.parametrize("prompt", [13, 32])
def test_greedy_generation_with_a_static_cache_matches_eager(name, prompt, compiled_programs):
    torch.manual_seed(prompt)
    model = build(architecture(name), size="small")
    ids = torch.randint(0, model.config.vocab_size, (1, prompt))
    settings = dict(max_new_tokens=NEW_TOKENS, do_sample=False, cache_implementation="static")
    with torch.no_grad():
        expected = model.generate(ids, **settings)
        torch._dynamo.reset()
        model.forward = torch.compile(model.forward, backend="lamina")
        generated = model.generate(ids, **settings)
    torch._dynamo.reset()
    assert torch.equal(generated, expected)
    assert len(compiled_programs) == 2, [len(p) for p in compiled_programs]

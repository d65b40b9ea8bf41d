"""Generating tokens through ``torch.compile(model.forward, backend="lamina")``, as users do:
``model.generate`` with a static key-value cache, greedy, token for token equal to eager, the
prompt's step and the decoding steps each compiled once (each step's keys and values written
at their positions of the cache: ``index_put``); with the default cache, which grows at each
step, the decoding step compiled once for every length of the cache (a symbolic size), and the
prompt's step once for every later prompt length."""

import warnings

import pytest
import torch

import lamina
from lamina.api import Compiler
from lamina.models.architectures import architecture, build, example_inputs

NEW_TOKENS = 16


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


def generated_and_expected(name: str, prompt: int, cache: str | None = "static", device: str = "cpu",
                           mode: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy tokens with a static cache (or ``transformers``' default with None), through lamina
    (compiled in ``mode``) and in eager PyTorch, on ``device``."""
    torch.manual_seed(prompt)
    model = build(architecture(name), size="small").to(device)
    ids = torch.randint(0, model.config.vocab_size, (1, prompt), device=device)
    settings = dict(max_new_tokens=NEW_TOKENS, do_sample=False, cache_implementation=cache)
    with torch.no_grad():
        expected = model.generate(ids, **settings)
        torch._dynamo.reset()
        model.forward = torch.compile(model.forward, backend="lamina", mode=mode)
        generated = model.generate(ids, **settings)
    torch._dynamo.reset()
    return generated, expected


@pytest.mark.parametrize("name", ["llama", "qwen2"])
@pytest.mark.parametrize("prompt", [13, 32])
def test_greedy_generation_with_a_static_cache_matches_eager(name, prompt, compiled_programs):
    generated, expected = generated_and_expected(name, prompt)
    assert torch.equal(generated, expected)
    assert len(compiled_programs) == 2, [len(p) for p in compiled_programs]


def test_a_model_compiled_before_by_lamina_compile_does_not_make_each_step_compile_again(compiled_programs):
    """``lamina.compile`` of a module watches submodule assignments process-wide; Dynamo must not
    see that count, or every decoding step (which assigns one) would compile again."""
    arch = architecture("llama")
    model = build(arch, size="small")
    inputs = example_inputs(arch, model, length=13)
    with torch.no_grad():
        lamina.compile(model, example_kwargs=inputs)(**inputs)
    compiled_programs.clear()
    generated, expected = generated_and_expected("llama", 13)
    assert torch.equal(generated, expected)
    assert len(compiled_programs) == 2, [len(p) for p in compiled_programs]


@pytest.mark.parametrize("name", ["llama", "qwen2"])
@pytest.mark.parametrize("prompt", [13, 32])
def test_greedy_generation_with_the_default_dynamic_cache_matches_eager_compiling_three_programs(
        name, prompt, compiled_programs):
    """The default cache grows by a token at each step. Dynamo compiles the prompt, the first step
    (its sizes still concrete) and, once the cache's length has changed, a step whose length is a
    symbol: lamina compiles that one once, whatever the number of tokens."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        generated, expected = generated_and_expected(name, prompt, cache=None)
    assert torch.equal(generated, expected)
    assert len(compiled_programs) == 3, [len(p) for p in compiled_programs]


def generations(name: str, prompts: tuple[int, ...], device: str = "cpu") -> tuple[list, list]:
    """Greedy tokens from one model for prompts of each length, with the default cache, through
    lamina (one ``torch.compile`` for them all) and in eager PyTorch."""
    torch.manual_seed(0)
    model = build(architecture(name), size="small").to(device)
    prompts_ids = [torch.randint(0, model.config.vocab_size, (1, n), device=device) for n in prompts]
    settings = dict(max_new_tokens=NEW_TOKENS, do_sample=False)
    with torch.no_grad():
        expected = [model.generate(ids, **settings) for ids in prompts_ids]
        torch._dynamo.reset()
        model.forward = torch.compile(model.forward, backend="lamina")
        generated = [model.generate(ids, **settings) for ids in prompts_ids]
    torch._dynamo.reset()
    return generated, expected


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_prompts_of_every_length_compile_the_prompts_step_once(name, compiled_programs):
    """At a second prompt length Dynamo makes the prompt's length a symbol: lamina compiles that
    step once (its projections on the contraction schedule, rows counted at run time), and every
    later length runs it. Four programs for any number of prompts and tokens."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        generated, expected = generations(name, (13, 32, 20, 7))
    for tokens, wanted in zip(generated, expected):
        assert torch.equal(tokens, wanted)
    assert len(compiled_programs) == 4, [len(p) for p in compiled_programs]
    assert "contraction" in compiled_programs[3]


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_prompts_of_every_length_compile_the_prompts_step_once_on_the_gpu(name, compiled_programs):
    generated, expected = generations(name, (13, 32, 20), device="cuda")
    for tokens, wanted in zip(generated, expected):
        assert torch.equal(tokens, wanted)
    assert len(compiled_programs) == 4, [len(p) for p in compiled_programs]


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_greedy_generation_with_the_default_cache_on_the_gpu_compiles_three_programs(name, compiled_programs):
    generated, expected = generated_and_expected(name, 13, cache=None, device="cuda", mode="reduce-overhead")
    assert torch.equal(generated, expected)
    assert len(compiled_programs) == 3, [len(p) for p in compiled_programs]

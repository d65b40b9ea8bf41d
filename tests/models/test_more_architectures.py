"""Hugging Face architectures outside the model suite, each with what sets it apart, tiny and
random, through ``torch.compile(model, backend="lamina")`` called the default way on the CPU, against
eager: what a user who brings another model meets first. 13 tokens, a multiple of no tile size,
in two sequences, with an attention mask whose second row is padded on the left; images of 32
pixels and 400 audio samples for the image and audio models.

A mixture of experts routes tokens with ``topk`` and ``sort``, which no plugin decomposes, and Llama-4
rotates complex numbers, which lamina does not compute: they run with the eager fallback, which names
them. Three take prompts of any length with two programs (the
length symbolic after the first), and some generate, greedy, token for token as
eager does, with as few programs as the suite's models: Gemma-3's layers alternate a sliding window
and the whole cache, and Bloom's ALiBi biases grow with the cache."""

from __future__ import annotations

import warnings

import pytest
import torch

from lamina.bench.measure import relative_error

transformers = pytest.importorskip("transformers")

SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, vocab_size=128,
             max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=0)
LAYERS_OF_TWO = dict(encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                     encoder_ffn_dim=128, decoder_ffn_dim=128, d_model=64)

ARCHITECTURES = {  # model type: (auto class, what sets it apart, its configuration beyond SMALL)
    "bloom": ("AutoModelForCausalLM", "ALiBi position biases", dict(n_head=4, n_layer=2)),
    "mpt": ("AutoModelForCausalLM", "ALiBi, no biases", dict(d_model=64, n_heads=4, n_layers=2, expansion_ratio=2)),
    "falcon": ("AutoModelForCausalLM", "attention beside the MLP, grouped heads",
               dict(num_kv_heads=2, new_decoder_architecture=True)),
    "gpt_neox": ("AutoModelForCausalLM", "rotation of a quarter of each head", dict(rotary_pct=0.25)),
    "gptj": ("AutoModelForCausalLM", "interleaved rotation",
             dict(n_embd=64, n_head=4, n_layer=2, rotary_dim=8, n_positions=64)),
    "gpt_bigcode": ("AutoModelForCausalLM", "one key-value head",
                    dict(n_embd=64, n_head=4, n_layer=2, n_positions=64, multi_query=True)),
    "phi": ("AutoModelForCausalLM", "partial rotation, attention beside the MLP", {}),
    "mistral": ("AutoModelForCausalLM", "a sliding window shorter than the input",
                dict(num_key_value_heads=2, sliding_window=8)),
    "deberta-v2": ("AutoModel", "disentangled relative attention", {}),
    "albert": ("AutoModel", "factorised embeddings, one layer's weights shared", dict(embedding_size=32)),
    "modernbert": ("AutoModel", "local and global attention", dict(global_attn_every_n_layers=2, local_attention=8)),
    "mamba": ("AutoModelForCausalLM", "a state-space model, its cache's states overwritten", {}),
    "bart": ("AutoModelForSeq2SeqLM", "encoder and decoder", LAYERS_OF_TWO),
    "gemma3_text": ("AutoModelForCausalLM", "sliding-window and global layers", dict(num_key_value_heads=2, head_dim=16)),
    "mixtral": ("AutoModelForCausalLM", "a mixture of experts",
                dict(num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2)),
    "longformer": ("AutoModel", "local attention over overlapping chunks (as_strided)", dict(attention_window=[4, 4])),
    "llama4_text": ("AutoModelForCausalLM", "a rotation of complex numbers, a mixture of experts",
                    dict(num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=1, head_dim=16,
                         intermediate_size_mlp=128)),
}
IN_PYTORCH = {"mixtral": "its routing (topk, sort)", "llama4_text": "its complex rotation and its routing"}
"""Those that need the eager fallback, and for what."""


IMAGES_AND_AUDIO = {  # model type: (what sets it apart, its configuration)
    "mobilenet_v2": ("depthwise convolutions, ReLU6", dict(num_channels=3, image_size=32, depth_multiplier=0.25)),
    "poolformer": ("pooling for attention, group norms", dict(num_channels=3, hidden_sizes=[8, 16, 32, 64],
                                                               depths=[1, 1, 1, 1])),
    "swin": ("shifted windows", dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
                                      window_size=4)),
    "wav2vec2": ("a convolutional feature encoder with group norms, weight-normed positions",
                 dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                      conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                      num_conv_pos_embedding_groups=4)),
}


@pytest.mark.parametrize("kind", sorted(IMAGES_AND_AUDIO))
def test_an_image_or_audio_architecture_outside_the_suite_matches_eager(kind):
    """Swin pools its output through an ``as_strided`` view."""
    config = transformers.AutoConfig.for_model(kind, **IMAGES_AND_AUDIO[kind][1])
    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(config).eval()
    inputs = {"input_values": torch.randn(2, 400)} if kind == "wav2vec2" else {"pixel_values": torch.randn(2, 3, 32, 32)}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = torch.compile(model, backend="lamina")(**inputs).last_hidden_state
        expected = model(**inputs).last_hidden_state
    error = relative_error(ours, expected)
    assert error < 1e-4, f"{kind} ({IMAGES_AND_AUDIO[kind][0]}): relative error {error:.2e}"


LENGTHS = (13, 17, 29)
"""Prompts of three lengths: Dynamo makes the length symbolic at the second, so lamina compiles the
first and one program for every other length."""
ANY_LENGTH = ["albert", "bloom", "gemma3_text"]
"""Those whose sizes once made lamina compile each length again (ALBERT, Bloom) or read a window wrong (Gemma-3)."""

GENERATING = [("gemma3_text", "static", 2), ("gemma3_text", None, 3), ("bloom", None, 3)]
"""Architecture, cache (None: ``transformers``' default, which grows) and the programs lamina compiles:
the prompt's step and the decoding step, and with the default cache the first decoding step apart
(Dynamo turns a size symbolic once it has changed)."""


def _model_and_inputs(kind: str):
    auto, _, extra = ARCHITECTURES[kind]
    config = transformers.AutoConfig.for_model(kind, **{**SMALL, **extra})
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = getattr(transformers, auto).from_config(config).eval()
    return model, _inputs(config, 13)


def _inputs(config, length: int) -> dict[str, torch.Tensor]:
    ids = torch.randint(3, SMALL["vocab_size"], (2, length))
    mask = torch.ones_like(ids)
    mask[1, :4] = 0
    inputs = {"input_ids": ids, "attention_mask": mask}
    if config.is_encoder_decoder:
        inputs["decoder_input_ids"] = ids[:, :7]
    return inputs


def _result(output) -> torch.Tensor:
    logits = getattr(output, "logits", None)
    return logits if logits is not None else output.last_hidden_state


@pytest.mark.parametrize("kind", sorted(ARCHITECTURES))
def test_an_architecture_outside_the_suite_matches_eager(kind):
    model, inputs = _model_and_inputs(kind)
    options = {"fallback": "eager"} if kind in IN_PYTORCH else {}
    compiled = torch.compile(model, backend="lamina", options=options)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = _result(compiled(**inputs))
        expected = _result(model(**inputs))
    ran_in_pytorch = [str(w.message) for w in caught if "ran these ops in PyTorch" in str(w.message)]
    assert bool(ran_in_pytorch) == (kind in IN_PYTORCH), ran_in_pytorch
    rows = inputs["attention_mask"].bool() if ours.shape[:2] == inputs["attention_mask"].shape else slice(None)
    error = relative_error(ours[rows], expected[rows])
    assert error < 1e-4, f"{kind} ({ARCHITECTURES[kind][1]}): relative error {error:.2e}"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("kind", sorted(ARCHITECTURES))
def test_an_architecture_outside_the_suite_matches_eager_on_the_gpu(kind, dtype):
    """On CUDA, where PyTorch hands over other ops (its fused attention among them); a bfloat16 model at
    most 1.25x as far from its float32 self as eager bfloat16 is."""
    model, inputs = _model_and_inputs(kind)
    model, inputs = model.cuda(), {name: value.cuda() for name, value in inputs.items()}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = _result(model(**inputs))
        model = model.to(dtype)
        options = {"fallback": "eager"} if kind in IN_PYTORCH else {}
        ours = _result(torch.compile(model, backend="lamina", options=options)(**inputs))
        expected = _result(model(**inputs))
    rows = inputs["attention_mask"].bool() if ours.shape[:2] == inputs["attention_mask"].shape else slice(None)
    error = relative_error(ours[rows], reference[rows])
    bound = 1e-4 if dtype == torch.float32 else 1.25 * relative_error(expected[rows], reference[rows])
    assert error <= bound, f"{kind} ({ARCHITECTURES[kind][1]}) in {dtype}: relative error {error:.2e}, bound {bound:.2e}"


@pytest.mark.parametrize("kind", ANY_LENGTH)
def test_prompts_of_any_length_compile_two_programs_and_match_eager(kind, compiled_programs):
    model, _ = _model_and_inputs(kind)
    torch._dynamo.reset()  # Dynamo remembers the lengths it saw of this architecture's code in other tests
    compiled = torch.compile(model, backend="lamina")
    for length in LENGTHS:
        inputs = _inputs(model.config, length)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # transformers' notes on the random model's settings
            ours, expected = _result(compiled(**inputs)), _result(model(**inputs))
        rows = inputs["attention_mask"].bool() if ours.shape[:2] == inputs["attention_mask"].shape else slice(None)
        error = relative_error(ours[rows], expected[rows])
        assert error < 1e-4, f"{kind} at {length} tokens: relative error {error:.2e}"
    torch._dynamo.reset()
    assert len(compiled_programs) == 2, f"{kind}: {len(compiled_programs)} programs for {len(LENGTHS)} lengths"


@pytest.fixture
def compiled_programs(monkeypatch):
    """How many programs lamina compiles."""
    from lamina.api import Compiler

    found = []
    original = Compiler.compile_captured

    def counted(self, *arguments, **named):
        found.append(original(self, *arguments, **named))
        return found[-1]

    monkeypatch.setattr(Compiler, "compile_captured", counted)
    return found


@pytest.mark.parametrize("kind,cache,programs", GENERATING, ids=[f"{k}-{c or 'default'}" for k, c, _ in GENERATING])
def test_an_architecture_outside_the_suite_generates_as_eager(kind, cache, programs, compiled_programs):
    model, inputs = _model_and_inputs(kind)
    generated, expected = _generated_and_expected(model, {"input_ids": inputs["input_ids"][:1]}, cache)
    assert torch.equal(generated, expected)
    assert len(compiled_programs) == programs


def test_a_padded_batch_generates_as_eager_through_a_sliding_window(compiled_programs):
    """Mistral's window shorter than the cache, two prompts (the second padded on the left) and the
    default cache: the mask's window (``Max(0, s - 7)`` positions) and the cache's length, a number
    argument, are sizes of the decoding step's one program."""
    model, inputs = _model_and_inputs("mistral")
    generated, expected = _generated_and_expected(model, inputs, None)
    assert torch.equal(generated, expected)
    assert len(compiled_programs) == 2


def _generated_and_expected(model, inputs: dict, cache: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    settings = dict(max_new_tokens=12, do_sample=False, cache_implementation=cache)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' notes on the random model's generation settings
        expected = model.generate(**inputs, **settings)
        torch._dynamo.reset()
        model.forward = torch.compile(model.forward, backend="lamina")
        generated = model.generate(**inputs, **settings)
    torch._dynamo.reset()
    return generated, expected

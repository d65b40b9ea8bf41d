"""The architectures users bring, at their published size and scaled down for CI.

Each entry says which ``transformers`` class builds the model (or lamina's own small
CNN), its configuration at the size of a published checkpoint and at the size CI runs
on the simulator, and how its users call it: ``model(**inputs)`` with what a tokenizer,
an image processor or a feature extractor returns. Weights are random (``weights``);
nothing is downloaded.

A model's *length* is what its input varies in: tokens for text, the side of the image
for the CNN. ViT and the Whisper encoder take inputs of one size, fixed by their
configuration (224-pixel images: 197 tokens; 30 s of audio: 1500 tokens), so there the
length builds the configuration: an image of ``length`` pixels a side, or ``length``
encoder positions.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Any, Mapping

import attrs
import torch

from lamina.core.errors import LaminaError

TEXT, PADDED_TEXT, IMAGE, AUDIO = "text", "padded text", "image", "audio"
INPUT_KINDS = (TEXT, PADDED_TEXT, IMAGE, AUDIO)

ENTRY_POINTS = ("lamina.compile", "torch.compile")
"""How CI compiles every architecture: ``lamina.compile(model, example_kwargs=inputs)`` and
``torch.compile(model, backend="lamina")``, each then called ``model(**inputs)``."""


@attrs.frozen
class Architecture:
    """One architecture of the model matrix."""

    name: str
    checkpoint: str
    """The published model whose sizes ``real`` holds."""
    model_class: str
    """The ``transformers`` class, or ``SmallCNN`` for lamina's own."""
    real: Mapping[str, Any]
    small: Mapping[str, Any]
    inputs: str = attrs.field(validator=attrs.validators.in_(INPUT_KINDS))
    layers_key: str
    """The configuration key that holds the number of layers."""
    lengths: tuple[int, ...]
    """The lengths the models bench runs at real size."""
    small_lengths: tuple[int, int] = (13, 32)
    """The lengths CI runs the scaled-down model at: the first a multiple of no tile size."""
    causal: bool = False
    """A decoder whose users call it with its KV cache on."""
    encoder_of: str | None = None
    """The attribute that holds the model users call (the Whisper encoder of ``WhisperModel``)."""
    attention: str = "sdpa"
    """The attention ``transformers`` runs: ``sdpa`` where the architecture has it."""

    def layers(self, size: str) -> int:
        return self.config_values(size)[self.layers_key]

    def config_values(self, size: str) -> Mapping[str, Any]:
        if size not in ("real", "small"):
            raise LaminaError(f"an architecture comes in size 'real' or 'small', not {size!r}")
        return self.real if size == "real" else self.small

    def describe(self) -> str:
        return f"{self.name}: {self.checkpoint}, called with {self.inputs} ({self.model_class})"


_TEXT_LENGTHS = (128, 512, 2048)

ARCHITECTURES: dict[str, Architecture] = {a.name: a for a in (
    Architecture(
        "gpt2", "GPT-2 124M", "GPT2LMHeadModel",
        real=dict(n_embd=768, n_layer=12, n_head=12, vocab_size=50257, n_positions=1024),
        small=dict(n_embd=64, n_layer=2, n_head=4, vocab_size=128, n_positions=64),
        inputs=TEXT, layers_key="n_layer", lengths=(128, 512), causal=True),
    Architecture(
        "bert", "BERT-base, uncased", "BertModel",
        real=dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                  vocab_size=30522, max_position_embeddings=512),
        small=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                   vocab_size=128, max_position_embeddings=64),
        inputs=PADDED_TEXT, layers_key="num_hidden_layers", lengths=(128, 512)),
    Architecture(
        "opt", "OPT-125M", "OPTForCausalLM",
        real=dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, ffn_dim=3072, vocab_size=50272,
                  max_position_embeddings=2048, word_embed_proj_dim=768),
        small=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, ffn_dim=128, vocab_size=128,
                   max_position_embeddings=64, word_embed_proj_dim=64),
        inputs=TEXT, layers_key="num_hidden_layers", lengths=_TEXT_LENGTHS, causal=True),
    Architecture(
        "phi3", "Phi-3-mini-4k", "Phi3ForCausalLM",
        real=dict(hidden_size=3072, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                  intermediate_size=8192, vocab_size=32064, max_position_embeddings=4096, pad_token_id=32000),
        small=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                   intermediate_size=128, vocab_size=128, max_position_embeddings=64, pad_token_id=0),
        inputs=TEXT, layers_key="num_hidden_layers", lengths=_TEXT_LENGTHS, causal=True),
    Architecture(
        "gemma", "Gemma-2B", "GemmaForCausalLM",
        real=dict(hidden_size=2048, num_hidden_layers=18, num_attention_heads=8, num_key_value_heads=1, head_dim=256,
                  intermediate_size=16384, vocab_size=256000, max_position_embeddings=8192),
        small=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1, head_dim=16,
                   intermediate_size=128, vocab_size=128, max_position_embeddings=64),
        inputs=TEXT, layers_key="num_hidden_layers", lengths=_TEXT_LENGTHS, causal=True),
    Architecture(
        "gemma2", "Gemma-2-2B", "Gemma2ForCausalLM",
        real=dict(hidden_size=2304, num_hidden_layers=26, num_attention_heads=8, num_key_value_heads=4, head_dim=256,
                  intermediate_size=9216, vocab_size=256000, max_position_embeddings=8192, sliding_window=4096),
        small=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                   intermediate_size=128, vocab_size=128, max_position_embeddings=64, sliding_window=8),
        inputs=TEXT, layers_key="num_hidden_layers", lengths=_TEXT_LENGTHS, causal=True, attention="eager"),
    Architecture(
        "mistral", "Mistral-7B v0.1", "MistralForCausalLM",
        real=dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                  intermediate_size=14336, vocab_size=32000, max_position_embeddings=32768, sliding_window=4096),
        small=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                   intermediate_size=128, vocab_size=128, max_position_embeddings=64, sliding_window=8),
        inputs=TEXT, layers_key="num_hidden_layers", lengths=_TEXT_LENGTHS, causal=True),
    Architecture(
        "qwen2", "Qwen2.5-7B", "Qwen2ForCausalLM",
        real=dict(hidden_size=3584, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                  intermediate_size=18944, vocab_size=152064, max_position_embeddings=32768, rope_theta=1e6),
        small=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                   intermediate_size=128, vocab_size=128, max_position_embeddings=64),
        inputs=TEXT, layers_key="num_hidden_layers", lengths=_TEXT_LENGTHS, causal=True),
    Architecture(
        "qwen3", "Qwen3-0.6B", "Qwen3ForCausalLM",
        real=dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                  intermediate_size=3072, vocab_size=151936, max_position_embeddings=40960, rope_theta=1e6,
                  tie_word_embeddings=True),
        small=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                   intermediate_size=128, vocab_size=128, max_position_embeddings=64),
        inputs=TEXT, layers_key="num_hidden_layers", lengths=_TEXT_LENGTHS, causal=True),
    Architecture(
        "llama", "TinyLlama-1.1B", "LlamaForCausalLM",
        real=dict(hidden_size=2048, num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4, head_dim=64,
                  intermediate_size=5632, vocab_size=32000, max_position_embeddings=2048, rms_norm_eps=1e-5),
        small=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                   intermediate_size=128, vocab_size=128, max_position_embeddings=64),
        inputs=TEXT, layers_key="num_hidden_layers", lengths=_TEXT_LENGTHS, causal=True),
    Architecture(
        "t5-encoder", "T5-base, encoder", "T5EncoderModel",
        real=dict(d_model=768, num_layers=12, num_heads=12, d_kv=64, d_ff=3072, vocab_size=32128),
        small=dict(d_model=64, num_layers=2, num_heads=4, d_kv=16, d_ff=128, vocab_size=128,
                   relative_attention_num_buckets=8, relative_attention_max_distance=32),
        inputs=TEXT, layers_key="num_layers", lengths=(128, 512)),
    Architecture(
        "vit", "ViT-base, 16-pixel patches, 224-pixel images", "ViTModel",
        real=dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                  image_size=224, patch_size=16),
        small=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                   image_size=16, patch_size=4),
        inputs=IMAGE, layers_key="num_hidden_layers", lengths=(224,), small_lengths=(20, 16)),
    Architecture(
        "whisper-encoder", "Whisper-small, encoder", "WhisperModel",
        real=dict(d_model=768, encoder_layers=12, encoder_attention_heads=12, encoder_ffn_dim=3072, num_mel_bins=80,
                  max_source_positions=1500, decoder_layers=1, decoder_attention_heads=12, decoder_ffn_dim=3072,
                  vocab_size=51865),
        small=dict(d_model=64, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=128, num_mel_bins=8,
                   max_source_positions=16, decoder_layers=1, decoder_attention_heads=4, decoder_ffn_dim=128,
                   vocab_size=128, max_target_positions=16, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                   decoder_start_token_id=1),
        inputs=AUDIO, layers_key="encoder_layers", lengths=(1500,), small_lengths=(13, 16), encoder_of="encoder"),
    Architecture(
        "cnn", "a small CNN: convolutions, batch norms, ReLU, pooling and a linear classifier", "SmallCNN",
        real=dict(channels=(64, 128, 256), classes=1000, blocks=3),
        small=dict(channels=(4, 8), classes=10, blocks=2),
        inputs=IMAGE, layers_key="blocks", lengths=(224,), small_lengths=(13, 16)),
)}
"""Every architecture of the model matrix, by name."""


def architecture(name: str) -> Architecture:
    if name not in ARCHITECTURES:
        raise LaminaError(f"unknown architecture {name!r}; lamina knows {', '.join(ARCHITECTURES)}")
    return ARCHITECTURES[name]


class SmallCNN(torch.nn.Module):
    """Convolution, batch norm and ReLU blocks, each halving the image with max pooling, then
    adaptive average pooling and a linear classifier: the layers of every classic CNN."""

    def __init__(self, channels: tuple[int, ...], classes: int, blocks: int):
        super().__init__()
        widths = (3, *channels)
        layers = []
        for k in range(blocks):
            inside, outside = widths[min(k, len(widths) - 1)], widths[min(k + 1, len(widths) - 1)]
            layers += [torch.nn.Conv2d(inside, outside, 3, padding=1, bias=False), torch.nn.BatchNorm2d(outside),
                       torch.nn.ReLU(), torch.nn.MaxPool2d(2, ceil_mode=True)]
        self.features = torch.nn.Sequential(*layers)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.classifier = torch.nn.Linear(widths[min(blocks, len(widths) - 1)], classes)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(pixel_values)), 1))


def _transformers():
    try:
        return importlib.import_module("transformers")
    except ImportError:
        raise LaminaError('building a model needs the transformers package; install it with: '
                          'pip install "lamina[models]"') from None


def _initialisers_skipped():
    """A context in which ``transformers`` builds a model without drawing its weights, which
    ``weights`` draws again anyway: at their published sizes on the CPU that draw took three
    quarters of a build (27 of 37 s for two layers of Qwen2.5-7B). Where this version of
    ``transformers`` has no such context, the weights are drawn twice, as before."""
    try:
        return importlib.import_module("transformers.initialization").no_init_weights()
    except (ImportError, AttributeError):
        return contextlib.nullcontext()


def _config_values(arch: Architecture, size: str, length: int, layers: int | None) -> dict[str, Any]:
    values = dict(arch.config_values(size))
    if layers is not None:
        if not 1 <= layers <= values[arch.layers_key]:
            raise LaminaError(f"{arch.name} has 1 to {values[arch.layers_key]} layers, not {layers}")
        values[arch.layers_key] = layers
    if arch.name == "vit":
        values["image_size"] = length
    elif arch.name == "whisper-encoder":
        values["max_source_positions"] = length
    return values


def build(arch: Architecture, *, size: str = "small", length: int | None = None, layers: int | None = None,
          dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
          seed: int | None = 0) -> torch.nn.Module:
    """A random-weight model of ``arch`` at ``size`` (``real`` or ``small``), in eval mode, as its users call it.

    ``length`` matters only where it fixes the configuration (ViT, the Whisper encoder);
    ``layers`` keeps that many of its layers. ``seed = None`` leaves the weights as allocated,
    unset, for work that reads only their shapes (which kernels a compile picks): drawing a
    published size's weights takes seconds on a CPU."""
    length = arch.lengths[0] if length is None else length
    values = _config_values(arch, size, length, layers)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            if arch.model_class == "SmallCNN":
                model = SmallCNN(**values)
            else:
                transformers = _transformers()
                config_class = getattr(transformers, arch.model_class).config_class
                config = config_class(**values, attn_implementation=arch.attention)
                with _initialisers_skipped():
                    model = getattr(transformers, arch.model_class)(config)
                model.tie_weights()  # which the skipped initialisation does too
                if arch.encoder_of:
                    model = getattr(model, arch.encoder_of)
    finally:
        torch.set_default_dtype(previous)
    model.eval()
    if seed is None:
        for parameter in model.parameters():
            parameter.requires_grad_(False)
    else:
        weights(model, seed)
    return model


def weights(model: torch.nn.Module, seed: int) -> None:
    """Every parameter and batch-norm statistic drawn afresh from ``seed``, away from the zeros and
    ones that initialisers give, so that a wrong bias, scale or statistic shows in the result.

    Matrices get the checkpoints' normal of std 0.02, convolution kernels one of std
    1/sqrt(fan-in) (0.02 would shrink an image to nothing over a few layers), vectors
    named ``bias`` a normal around 0 and other vectors (norm scales) one around 1."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.requires_grad_(False)
            if parameter.dim() >= 3:
                parameter.normal_(0.0, parameter[0].numel() ** -0.5)
            elif parameter.dim() == 2 or name.endswith("bias"):
                parameter.normal_(0.0, 0.02)
            else:
                parameter.normal_(1.0, 0.02)
        for module in model.modules():
            if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
                module.running_mean.normal_(0.0, 0.1)
                module.running_var.uniform_(0.5, 1.5)


def example_inputs(arch: Architecture, model: torch.nn.Module, *, batch: int = 1, length: int | None = None,
                   device: str | torch.device = "cpu", seed: int = 0) -> dict[str, torch.Tensor]:
    """What users pass as ``model(**inputs)``: token ids and their attention mask, pixel values, or mel
    features. BERT's batch is padded: each row shorter than the one before, the last by a quarter
    (one row alone is padded by a quarter too)."""
    length = arch.lengths[0] if length is None else length
    generator = torch.Generator().manual_seed(seed)
    dtype = next(model.parameters()).dtype
    if arch.inputs in (TEXT, PADDED_TEXT):
        vocab = model.config.vocab_size
        ids = torch.randint(0, vocab, (batch, length), generator=generator)
        mask = torch.ones(batch, length, dtype=torch.long)
        if arch.inputs == PADDED_TEXT:
            for row in range(batch):
                mask[row, length - (length // 4) * (row + (batch == 1)) // max(batch - 1, 1):] = 0
        inputs = {"input_ids": ids, "attention_mask": mask}
    elif arch.inputs == IMAGE:
        inputs = {"pixel_values": torch.randn(batch, 3, length, length, generator=generator).to(dtype)}
    else:
        frames = 2 * model.config.max_source_positions
        inputs = {"input_features": torch.randn(batch, model.config.num_mel_bins, frames, generator=generator).to(dtype)}
    return {name: value.to(device) for name, value in inputs.items()}


def main_output(outputs: Any) -> torch.Tensor:
    """The tensor a model's users read: logits, the last hidden state, or the tensor it returns."""
    if isinstance(outputs, torch.Tensor):
        return outputs
    for key in ("logits", "last_hidden_state"):
        value = outputs.get(key) if isinstance(outputs, Mapping) else getattr(outputs, key, None)
        if value is not None:
            return value
    raise LaminaError(f"the model returned {type(outputs).__name__}, with neither logits nor a last hidden state")



_CALLED_WITH = {TEXT: "input_ids, attention_mask", PADDED_TEXT: "input_ids, a padded attention_mask",
                IMAGE: "pixel_values", AUDIO: "input_features"}
_UNITS = {TEXT: "tokens", PADDED_TEXT: "tokens", IMAGE: "pixel images", AUDIO: "positions"}


def markdown_table() -> str:
    """The supported architectures as the README lists them: each one CI checks, through each entry
    point, at two lengths, against eager PyTorch in float64 (tests/models/test_model_matrix.py)."""
    header = ["architecture", "published size", "called with", *(f"`{e}`" for e in ENTRY_POINTS), "CI lengths"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for arch in ARCHITECTURES.values():
        called = _CALLED_WITH[arch.inputs] + (", KV cache on" if arch.causal else "")
        lengths = f"{arch.small_lengths[0]} and {arch.small_lengths[1]} {_UNITS[arch.inputs]}"
        row = [f"`{arch.name}`", arch.checkpoint, called, *("yes" for _ in ENTRY_POINTS), lengths]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)

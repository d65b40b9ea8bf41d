"""Random-weight ``transformers`` models built from a ``ModelConfig``, and the function lamina compiles.

``transformers`` is an optional dependency (the ``models`` extra); it is imported only
when a model is built. Weights are drawn from a seeded generator, in the chosen dtype,
on the chosen device: nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Iterator

import torch

from lamina.core.errors import LaminaError
from lamina.models.configs import ModelConfig

MINIMUM_TRANSFORMERS = (4, 45)
_CLASSES = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "qwen2": ("Qwen2Config", "Qwen2ForCausalLM")}


class CausalLMLogits(torch.nn.Module):
    """A causal language model as the function lamina compiles: token ids -> logits, no KV cache."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids, use_cache=False).logits

    @property
    def num_layers(self) -> int:
        return len(self.model.model.layers)


def _transformers():
    try:
        transformers = importlib.import_module("transformers")
    except ImportError:
        raise LaminaError(
            "building a model needs the transformers package, which is not installed; "
            'install it with: pip install "lamina[models]"'
        ) from None
    version = tuple(int(part) for part in transformers.__version__.split(".")[:2] if part.isdigit())
    if version < MINIMUM_TRANSFORMERS:
        raise LaminaError(
            f"lamina builds models with transformers {'.'.join(map(str, MINIMUM_TRANSFORMERS))} or newer, and "
            f"{transformers.__version__} is installed; upgrade it with: pip install -U \"lamina[models]\""
        )
    return transformers


def transformers_config(config: ModelConfig, num_layers: int | None = None):
    """``config`` as the ``transformers`` configuration of its architecture."""
    transformers = _transformers()
    layers = config.num_hidden_layers if num_layers is None else num_layers
    if layers < 0:
        raise LaminaError(f"a model needs zero or more decoder layers, not {layers}")
    config_class = getattr(transformers, _CLASSES[config.architecture][0])
    return config_class(
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=layers,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads,
        head_dim=config.head_dim,
        vocab_size=config.vocab_size,
        rope_theta=config.rope_theta,
        rms_norm_eps=config.rms_norm_eps,
        max_position_embeddings=config.max_position_embeddings,
        tie_word_embeddings=False,
        attn_implementation="sdpa",
    )


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Create parameters in ``dtype``, as ``from_pretrained(dtype=...)`` does: buffers that
    the model computes in float32 on purpose (RoPE's inverse frequencies) stay float32."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def build_model(config: ModelConfig, *, num_layers: int | None = None, dtype: torch.dtype = torch.float32,
                device: str | torch.device = "cpu", seed: int = 0) -> CausalLMLogits:
    """A random-weight model of ``config`` (with ``num_layers`` decoder layers if given), in eval mode."""
    if dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise LaminaError(f"models are built in float32, bfloat16 or float16, not {dtype}")
    transformers = _transformers()
    model_class = getattr(transformers, _CLASSES[config.architecture][1])
    hf_config = transformers_config(config, num_layers)
    with _default_dtype(dtype), torch.device(device):
        model = model_class(hf_config)
    model.eval()
    _draw_weights(model, seed)
    return CausalLMLogits(model).eval()


def _draw_weights(model: torch.nn.Module, seed: int) -> None:
    """Every parameter drawn afresh from ``seed``: matrices with the checkpoints' initialiser
    (normal, std 0.02), and biases and norm scales away from the zeros and ones that
    ``transformers`` gives them, so that a wrong bias or scale shows in the logits."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.requires_grad_(False)
            if parameter.dim() >= 2:
                parameter.normal_(0.0, 0.02)
            elif name.endswith("bias"):
                parameter.normal_(0.0, 0.02)
            else:
                parameter.normal_(1.0, 0.02)


def random_input_ids(config: ModelConfig, seq: int, *, device: str | torch.device = "cpu", seed: int = 0) -> torch.Tensor:
    """Token ids of shape (1, ``seq``), drawn uniformly from the vocabulary."""
    if seq < 1:
        raise LaminaError(f"the sequence length must be at least 1, not {seq}")
    if seq > config.max_position_embeddings:
        raise LaminaError(f"{config.name} takes at most {config.max_position_embeddings} positions, not {seq}")
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, config.vocab_size, (1, seq), generator=generator).to(device)


@contextlib.contextmanager
def truncated(model: CausalLMLogits, num_layers: int) -> Iterator[CausalLMLogits]:
    """``model`` with only its first ``num_layers`` decoder layers, sharing their weights.

    Compiling or profiling the same model at two depths and subtracting gives the
    kernels of one decoder layer without building another model.
    """
    inner = model.model.model
    layers, count = inner.layers, model.model.config.num_hidden_layers
    if not 0 <= num_layers <= len(layers):
        raise LaminaError(f"cannot keep {num_layers} of the model's {len(layers)} decoder layers")
    inner.layers = torch.nn.ModuleList(list(layers)[:num_layers])
    model.model.config.num_hidden_layers = num_layers
    try:
        yield model
    finally:
        inner.layers = layers
        model.model.config.num_hidden_layers = count


@contextlib.contextmanager
def cast_floating_state(model: torch.nn.Module, dtype: torch.dtype) -> Iterator[torch.nn.Module]:
    """``model`` with every floating parameter and buffer cast to ``dtype``, restored afterwards.

    Casting to a wider type and back is exact, so the eager reference (float64 for a
    float32 model, float32 for a bfloat16 one) runs on the very weights that lamina saw,
    without a second copy of the model in memory.
    """
    tensors = [t for t in (*model.parameters(), *model.buffers()) if t.is_floating_point()]
    originals = [t.dtype for t in tensors]
    for t, original in zip(tensors, originals):
        if dtype != original and torch.finfo(dtype).bits <= torch.finfo(original).bits:
            raise LaminaError(f"casting the model to {dtype} would lose precision of its {original} state")
    for t in tensors:
        t.data = t.data.to(dtype)
    try:
        yield model
    finally:
        for t, original in zip(tensors, originals):
            t.data = t.data.to(original)

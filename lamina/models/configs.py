"""The transformer models that lamina ships configurations for, and their scaled-down test sizes.

The numbers are those of the published checkpoints (TinyLlama-1.1B, Qwen2.5-7B); lamina
builds the architectures from them with random weights, so nothing is downloaded.
"""

from __future__ import annotations

import attrs

from lamina.core.errors import LaminaError

ARCHITECTURES = ("llama", "qwen2")


@attrs.frozen
class ModelConfig:
    """The shape of a decoder-only transformer, as ``transformers`` configures it."""

    name: str
    architecture: str = attrs.field(validator=attrs.validators.in_(ARCHITECTURES))
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    rope_theta: float
    rms_norm_eps: float
    max_position_embeddings: int

    @property
    def qkv_bias(self) -> bool:
        """Qwen2's q, k and v projections carry a bias; Llama's carry none."""
        return self.architecture == "qwen2"

    def layer_parameters(self) -> int:
        """Weights (and biases) of one decoder layer."""
        q = self.num_attention_heads * self.head_dim
        kv = self.num_key_value_heads * self.head_dim
        attention = self.hidden_size * (q + 2 * kv) + q * self.hidden_size
        if self.qkv_bias:
            attention += q + 2 * kv
        mlp = 3 * self.hidden_size * self.intermediate_size
        return attention + mlp + 2 * self.hidden_size

    def forward_flops(self, seq: int, layers: int | None = None) -> float:
        """Multiply-adds of one forward pass over ``seq`` tokens, counted as two FLOPs each."""
        layers = self.num_hidden_layers if layers is None else layers
        head = self.hidden_size * self.vocab_size
        attention = 2 * self.num_attention_heads * seq * seq * self.head_dim
        return 2.0 * seq * (layers * self.layer_parameters() + head) + 2.0 * layers * attention

    def describe(self) -> str:
        bias = ", q/k/v biases" if self.qkv_bias else ""
        return (f"{self.name} ({self.architecture}): {self.num_hidden_layers} layers, hidden {self.hidden_size}, "
                f"intermediate {self.intermediate_size}, {self.num_attention_heads} heads / "
                f"{self.num_key_value_heads} KV heads of {self.head_dim}, vocab {self.vocab_size}, "
                f"rope theta {self.rope_theta:g}, RMSNorm eps {self.rms_norm_eps:g}{bias}")


TINYLLAMA_1_1B = ModelConfig(
    name="tinyllama",
    architecture="llama",
    hidden_size=2048,
    intermediate_size=5632,
    num_hidden_layers=22,
    num_attention_heads=32,
    num_key_value_heads=4,
    head_dim=64,
    vocab_size=32000,
    rope_theta=10000.0,
    rms_norm_eps=1e-5,
    max_position_embeddings=2048,
)

QWEN2_5_7B = ModelConfig(
    name="qwen2.5-7b",
    architecture="qwen2",
    hidden_size=3584,
    intermediate_size=18944,
    num_hidden_layers=28,
    num_attention_heads=28,
    num_key_value_heads=4,
    head_dim=128,
    vocab_size=152064,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    max_position_embeddings=32768,
)

MODELS: dict[str, ModelConfig] = {c.name: c for c in (TINYLLAMA_1_1B, QWEN2_5_7B)}
"""The models ``lamina run --model`` knows, by name."""


def scaled_down(config: ModelConfig) -> ModelConfig:
    """``config``'s architecture at the size CI runs on the simulator: 2 layers, hidden 64,
    4 heads, 2 KV heads, intermediate 128, vocab 128 (rope theta, epsilon and biases kept)."""
    return attrs.evolve(
        config,
        name=f"{config.name}-scaled-down",
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        vocab_size=128,
        max_position_embeddings=256,
    )


def model_config(name: str) -> ModelConfig:
    """The shipped configuration called ``name``."""
    if name not in MODELS:
        raise LaminaError(f"unknown model {name!r}; lamina ships configurations for {', '.join(MODELS)}")
    return MODELS[name]

"""Whole transformer models: shipped configurations and random-weight builders."""

from lamina.models.builder import CausalLMLogits, build_model, cast_floating_state, random_input_ids, truncated
from lamina.models.configs import MODELS, QWEN2_5_7B, TINYLLAMA_1_1B, ModelConfig, model_config, scaled_down

__all__ = [
    "MODELS", "QWEN2_5_7B", "TINYLLAMA_1_1B", "ModelConfig", "model_config", "scaled_down",
    "CausalLMLogits", "build_model", "cast_floating_state", "random_input_ids", "truncated",
]

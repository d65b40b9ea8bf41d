"""The shipped configurations, the random-weight builder and the per-layer kernel arithmetic."""

import pytest
import torch

from lamina.core.errors import LaminaError
from lamina.models import MODELS, QWEN2_5_7B, TINYLLAMA_1_1B, build_model, cast_floating_state, random_input_ids
from lamina.models import scaled_down, truncated
from lamina.models.layer_counts import layer_counts


def parameters(config) -> int:
    return config.num_hidden_layers * config.layer_parameters() + 2 * config.vocab_size * config.hidden_size + config.hidden_size


def test_the_published_sizes():
    assert round(parameters(TINYLLAMA_1_1B) / 1e9, 2) == 1.10
    assert round(parameters(QWEN2_5_7B) / 1e9, 2) == 7.62
    assert (TINYLLAMA_1_1B.qkv_bias, QWEN2_5_7B.qkv_bias) == (False, True)


@pytest.mark.parametrize("name", list(MODELS))
def test_the_built_model_has_the_configured_shape(name, seed):
    config = scaled_down(MODELS[name])
    model = build_model(config, seed=seed)
    assert sum(p.numel() for p in model.parameters()) == parameters(config)
    hf = model.model.config
    assert (hf.hidden_size, hf.intermediate_size, hf.num_attention_heads, hf.num_key_value_heads) == (64, 128, 4, 2)
    assert (hf.vocab_size, hf.rms_norm_eps, hf._attn_implementation) == (128, config.rms_norm_eps, "sdpa")
    attention = model.model.model.layers[0].self_attn
    assert (attention.q_proj.bias is not None) == config.qkv_bias
    assert model.model.model.rotary_emb.inv_freq[1].item() == pytest.approx(config.rope_theta ** (-2 / 16))
    assert not model.training and not any(p.requires_grad for p in model.parameters())


def test_weights_are_seeded_random_and_not_zero(seed):
    config = scaled_down(QWEN2_5_7B)
    ids = random_input_ids(config, 5, seed=seed)
    a, b, c = (build_model(config, seed=s) for s in (seed, seed, seed + 1))
    assert torch.equal(a(ids), b(ids)) and not torch.equal(a(ids), c(ids))
    for name, p in a.named_parameters():
        assert p.std() > 0.005, name
    assert abs(a.model.model.norm.weight.mean().item() - 1) < 0.05


def test_bfloat16_weights_keep_float32_rotary_frequencies(seed):
    model = build_model(scaled_down(TINYLLAMA_1_1B), dtype=torch.bfloat16, seed=seed)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert model.model.model.rotary_emb.inv_freq.dtype == torch.float32
    assert torch.get_default_dtype() == torch.float32


def test_casting_for_the_reference_is_exact_and_undone(seed):
    config = scaled_down(TINYLLAMA_1_1B)
    model = build_model(config, dtype=torch.bfloat16, seed=seed)
    ids = random_input_ids(config, 7, seed=seed)
    before = model(ids)
    with cast_floating_state(model, torch.float32):
        assert model(ids).dtype == torch.float32
    assert model.model.model.rotary_emb.inv_freq.dtype == torch.float32
    assert torch.equal(model(ids), before)
    with pytest.raises(LaminaError, match="lose precision"):
        with cast_floating_state(model, torch.float16):
            pass


def test_truncation_shares_weights_and_is_undone(seed):
    config = scaled_down(QWEN2_5_7B)
    model = build_model(config, seed=seed)
    ids = random_input_ids(config, 6, seed=seed)
    full = model(ids)
    with truncated(model, 1):
        assert model.num_layers == 1 and model.model.config.num_hidden_layers == 1
        shallow = model(ids)
    assert model.num_layers == 2 and torch.equal(model(ids), full)
    assert not torch.allclose(shallow, full)
    with pytest.raises(LaminaError, match="cannot keep 3"):
        with truncated(model, 3):
            pass


@pytest.mark.parametrize("layers,expected", [(1, (7, 2)), (2, (7, 2)), (5, (7, 2))])
def test_per_layer_count_is_the_difference_of_two_depths(seed, layers, expected):
    model = build_model(scaled_down(TINYLLAMA_1_1B), num_layers=layers, seed=seed)
    per_layer, outside = expected
    counts = layer_counts(lambda m: outside + per_layer * m.num_layers, model)
    assert (counts.total, counts.per_layer, counts.outside_layers) == (outside + per_layer * layers, per_layer, outside)
    assert counts.shallow_layers == (0 if layers == 1 else 1)
    assert model.num_layers == layers


def test_an_old_transformers_is_a_clear_error(monkeypatch):
    import types

    import lamina.models.builder as builder

    monkeypatch.setattr(builder.importlib, "import_module", lambda name: types.SimpleNamespace(__version__="4.40.2"))
    with pytest.raises(LaminaError, match=r"4\.45 or newer, and 4\.40\.2 is installed"):
        build_model(scaled_down(TINYLLAMA_1_1B))

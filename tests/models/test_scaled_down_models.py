"""Scaled-down Llama and Qwen2 through all six levels, on the Kernel IR simulator, against eager PyTorch.

13 tokens is a multiple of no tile size; 32 is a multiple of most.
"""

import pytest
import torch

import lamina
from lamina.backends.cuda.backend import CudaBackend
from lamina.bench.measure import relative_error
from lamina.core.pipeline import LEVELS
from lamina.models import MODELS, build_model, cast_floating_state, random_input_ids, scaled_down

CASES = [(name, seq) for name in MODELS for seq in (13, 32)]
IDS = [f"{name}-S{seq}" for name, seq in CASES]


@pytest.mark.parametrize("name,seq", CASES, ids=IDS)
def test_logits_match_eager_pytorch_in_float64(compiled_model, name, seq):
    case = compiled_model(name, seq)
    out = case.compiled(case.ids)
    with cast_floating_state(case.model, torch.float64), torch.no_grad():
        reference = case.model(case.ids)
    assert out.shape == (1, seq, case.config.vocab_size)
    error = relative_error(out, reference)
    assert error < 1e-4, f"{case}: relative error {error:.2e}"


@pytest.mark.parametrize("name,seq", CASES, ids=IDS)
def test_every_level_is_produced_and_printed(compiled_model, name, seq):
    compiled = compiled_model(name, seq).compiled
    printed = {level: compiled.ir(level) for level in LEVELS}
    assert all(text.strip() for text in printed.values())
    assert "aten.embedding" in printed["torch"]
    kernels = compiled.compilation.kernels.kernels
    assert len(compiled.compilation.loop.kernels) == len(compiled.compilation.tiles) == len(kernels)
    assert printed["cuda"].count("__global__") == len(kernels)


def test_qwen2_graph_carries_the_qkv_biases(compiled_model):
    case = compiled_model("qwen2.5-7b", 13)
    biases = [i.name for i in case.compiled.compilation.graph.inputs if i.name.endswith(("q_proj_bias", "k_proj_bias", "v_proj_bias"))]
    assert len(biases) == 3 * case.config.num_hidden_layers, biases


def test_a_changed_bias_shows_in_the_logits(compiled_model):
    """The weights are live inputs: changing a bias changes lamina's logits as it changes PyTorch's."""
    case = compiled_model("qwen2.5-7b", 13)
    bias = case.model.model.model.layers[0].self_attn.v_proj.bias
    saved = bias.clone()
    with torch.no_grad():
        before = case.model(case.ids)
    try:
        bias.add_(0.5)
        out = case.compiled(case.ids)
        with torch.no_grad():
            reference = case.model(case.ids)
    finally:
        bias.copy_(saved)
    assert relative_error(reference, before) > 1e-3
    assert relative_error(out, reference) < 1e-4, f"{case}"


def test_every_kernel_compiles_with_nvrtc_for_sm_90(compiled_model):
    compilation = compiled_model("qwen2.5-7b", 13).compiled.compilation
    compiled = CudaBackend().compile(compilation.kernels, "sm_90")
    assert set(compiled) == {k.name for k in compilation.kernels.kernels}
    assert all(k.cubin for k in compiled.values())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 1e-4), (torch.bfloat16, 2e-2)], ids=["f32", "bf16"])
@pytest.mark.parametrize("name", list(MODELS))
def test_logits_match_eager_pytorch_on_the_gpu(seed, name, dtype, tolerance):
    config = scaled_down(MODELS[name])
    model = build_model(config, dtype=dtype, device="cuda", seed=seed)
    for seq in (13, 32):
        ids = random_input_ids(config, seq, device="cuda", seed=seed)
        out = lamina.compile(model, (ids,))(ids)
        with cast_floating_state(model, torch.float64 if dtype == torch.float32 else torch.float32), torch.no_grad():
            reference = model(ids)
        error = relative_error(out, reference)
        assert error < tolerance, f"{config.name} at {seq} tokens in {dtype}, seed {seed}: relative error {error:.2e}"

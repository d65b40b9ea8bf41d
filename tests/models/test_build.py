"""``build``: transformers' own initialisers are skipped (``weights`` draws every parameter), so
the model must still be what its configuration says: embeddings tied where it ties them, and no
parameter left as the uninitialised memory the skipped initialisers would have filled."""

import pytest
import torch

from lamina.models.architectures import ARCHITECTURES, build


@pytest.mark.parametrize("name", [n for n, a in ARCHITECTURES.items() if a.model_class != "SmallCNN"])
def test_a_built_model_ties_what_its_configuration_ties_and_draws_every_parameter(name):
    model = build(ARCHITECTURES[name], size="small")
    tied = getattr(model.config, "tie_word_embeddings", False)
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if tied and output is not None:
        assert output.weight is model.get_input_embeddings().weight
    for parameter_name, parameter in model.named_parameters():
        assert torch.isfinite(parameter).all() and parameter.float().std() > 0.001, parameter_name

"""Scaled-down Llama and Qwen2, compiled once per sequence length and shared by the tests."""

import os

import pytest

import lamina
from lamina.models import MODELS, build_model, random_input_ids, scaled_down


class CompiledModel:
    def __init__(self, name: str, seq: int, seed: int):
        self.config = scaled_down(MODELS[name])
        self.seed = seed
        self.model = build_model(self.config, seed=seed)
        self.ids = random_input_ids(self.config, seq, seed=seed)
        self.compiled = lamina.compile(self.model, (self.ids,))

    def __repr__(self) -> str:
        return f"{self.config.name} at {self.ids.shape[1]} tokens, seed {self.seed}"


@pytest.fixture(scope="session")
def seed() -> int:
    """Fresh weights and tokens on every run; failure messages print the seed."""
    return int.from_bytes(os.urandom(4), "little")


@pytest.fixture(scope="session")
def compiled_model(seed):
    """``compiled_model(name, seq)``: the scaled-down model compiled for ``seq`` tokens, once a session."""
    cache: dict[tuple[str, int], CompiledModel] = {}

    def get(name: str, seq: int) -> CompiledModel:
        if (name, seq) not in cache:
            cache[name, seq] = CompiledModel(name, seq, seed)
        return cache[name, seq]

    return get

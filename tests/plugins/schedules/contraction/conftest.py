"""Fixtures of the contraction schedule's tests."""

import pytest

import lamina.api


@pytest.fixture
def compiled_programs(monkeypatch):
    """Each program lamina compiles while the test runs (``torch.compile`` hands it several), in order."""
    found = []
    compile_captured = lamina.api.Compiler.compile_captured

    def recorded(self, *args, **kwargs):
        found.append(compile_captured(self, *args, **kwargs))
        return found[-1]

    monkeypatch.setattr(lamina.api.Compiler, "compile_captured", recorded)
    return found

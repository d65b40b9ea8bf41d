"""The folder that the plugin tests install distributions into (``plugin_distributions``)."""

import sys

import pytest

from lamina.core.plugins import reset_plugin_managers


@pytest.fixture
def site(tmp_path, monkeypatch):
    """An empty folder on sys.path and as the working directory (no ``lamina.toml`` above it
    counts), with plugin managers built afresh and the test plugins' modules forgotten after."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    reset_plugin_managers()
    yield tmp_path
    reset_plugin_managers()
    for name in list(sys.modules):
        if name.startswith("lamina_test_plugin"):
            del sys.modules[name]

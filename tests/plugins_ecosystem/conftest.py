"""Fixtures of the plugin-ecosystem tests."""

import pytest

from lamina.core.plugins import reset_plugin_managers

from tests.plugins_ecosystem import example_packages


@pytest.fixture
def examples(tmp_path, monkeypatch):
    """Both example packages installed, no config file, plugin managers fresh."""
    monkeypatch.chdir(tmp_path)
    for var in ("LAMINA_SCHEDULE", "LAMINA_PLUGINS", "LAMINA_DISABLE_PLUGINS", "LAMINA_SELECTION", "LAMINA_KEEP"):
        monkeypatch.delenv(var, raising=False)
    site = tmp_path / "site"
    site.mkdir()
    for package in example_packages.PACKAGES:
        example_packages.install(site, package, monkeypatch)
    reset_plugin_managers()
    yield
    reset_plugin_managers()
    example_packages.forget_modules()

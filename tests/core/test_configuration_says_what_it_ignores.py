"""The configuration reports of the issue "No wrong answers", each as the user met it: a setting
that does nothing is a ConfigWarning naming the closest valid one, an error under ``strict``."""

import os

import pytest
import torch

import lamina
from lamina.core.config import load_config
from lamina.core.errors import ConfigError, ConfigWarning

from tests.core.plugin_distributions import fusion_rule_plugin, install_plugin


def program(x):
    return torch.tanh(x) * 2.0 + x


@pytest.fixture(autouse=True)
def no_lamina_environment(monkeypatch):
    """No ``LAMINA_`` variable of the environment the tests run in counts."""
    for var in [v for v in os.environ if v.startswith("LAMINA_")]:
        monkeypatch.delenv(var)


def compiles_and_runs(**settings):
    x = torch.randn(5, 33)
    compiled = lamina.compile(program, (x,), **settings)
    torch.testing.assert_close(compiled(x), program(x))


def test_an_unknown_knob_in_the_environment_warns(site, monkeypatch):
    monkeypatch.setenv("LAMINA_KNOB_FOO", "3")
    with pytest.warns(ConfigWarning, match=r"the knob foo does nothing: no schedule or fusion rule declares a knob 'foo'"):
        compiles_and_runs()
    monkeypatch.setenv("LAMINA_KNOB_THREDS", "64")
    monkeypatch.delenv("LAMINA_KNOB_FOO")
    with pytest.warns(ConfigWarning, match=r"the knob threds does nothing.*the closest is .*pointwise\.threads"):
        compiles_and_runs()


def test_an_unknown_knob_in_the_file_warns(site):
    (site / "lamina.toml").write_text("[knobs]\nnot_a_knob = 3\n")
    with pytest.warns(ConfigWarning, match=r"the knob not_a_knob does nothing"):
        compiles_and_runs()


def test_an_unknown_knob_under_strict_is_an_error(site, monkeypatch):
    (site / "lamina.toml").write_text("strict = true\n[knobs]\nnot_a_knob = 3\n")
    with pytest.raises(ConfigError, match=r"(?s)the knob not_a_knob does nothing.*strict is set"):
        compiles_and_runs()


def test_an_allow_listed_plugin_that_does_not_exist_warns(site, monkeypatch):
    install_plugin(site, "lamina-counted", "counted", "lamina_test_plugin_counted",
                   fusion_rule_plugin("counted_rule"))
    monkeypatch.setenv("LAMINA_PLUGINS", "countd")
    with pytest.warns(ConfigWarning, match=r"plugins \(LAMINA_PLUGINS\) names the plugin 'countd', which is not "
                                           r"installed, so it does nothing \(did you mean 'counted'\?\)"):
        compiles_and_runs()


def test_a_misspelt_builtin_in_the_disable_variable_warns(site, monkeypatch):
    monkeypatch.setenv("LAMINA_DISABLE_PLUGINS", "lamina.builtin.schedules.pointwse")
    with pytest.warns(ConfigWarning, match=r"disable \(LAMINA_DISABLE_PLUGINS\) names the plugin "
                                           r"'lamina.builtin.schedules.pointwse'.*did you mean "
                                           r"'lamina.builtin.schedules.pointwise'"):
        compiles_and_runs()


def test_a_plugin_name_no_plugin_has_under_strict_is_an_error(site, monkeypatch):
    monkeypatch.setenv("LAMINA_DISABLE_PLUGINS", "lamina.builtin.schedules.pointwse")
    monkeypatch.setenv("LAMINA_STRICT", "1")
    with pytest.raises(ConfigError, match=r"(?s)'lamina.builtin.schedules.pointwse', which is not installed.*strict is set"):
        compiles_and_runs()


def test_a_bad_boolean_is_reported_with_its_lamina_prefix(site, monkeypatch):
    monkeypatch.setenv("LAMINA_STRICT_PLUGINS", "maybe")
    with pytest.raises(ConfigError, match=r"^LAMINA_STRICT_PLUGINS: expected 1 or 0, got 'maybe'"):
        compiles_and_runs()


def test_an_unknown_variable_under_strict_is_an_error(site):
    with pytest.raises(ConfigError, match=r"(?s)LAMINA_SCHEDUEL is not a lamina setting.*did you mean 'LAMINA_SCHEDULE'"):
        load_config(environ={"LAMINA_SCHEDUEL": "generic", "LAMINA_STRICT": "1"})
    with pytest.raises(ConfigError, match=r"LAMINA_SCHEDUEL is not a lamina setting"):
        load_config(environ={"LAMINA_SCHEDUEL": "generic"}, strict=True)


def test_a_setting_from_python_that_lamina_does_not_know_names_the_closest(site):
    with pytest.raises(ConfigError, match=r"the settings given from Python: unknown setting 'cache_dr' "
                                          r"\(did you mean 'cache_dir'\?\)"):
        compiles_and_runs(cache_dr="kernels")
    with pytest.raises(ConfigError, match=r"the settings given from Python: disable must be a list of strings"):
        compiles_and_runs(disable="lamina.builtin.fusion")


def test_a_relative_cache_dir_in_a_file_is_relative_to_its_folder(site, monkeypatch):
    (site / "lamina.toml").write_text('cache_dir = "kernels"\n')
    below = site / "src" / "deeper"
    below.mkdir(parents=True)
    monkeypatch.chdir(below)
    assert load_config(environ={}).cache_dir == str(site / "kernels")
    assert load_config(environ={"LAMINA_CACHE_DIR": "here"}).cache_dir == "here"
    monkeypatch.setenv("HOME", str(site / "home"))
    (site / "lamina.toml").write_text('cache_dir = "~/kernels"\n')
    assert load_config(environ={}).cache_dir == str(site / "home" / "kernels")
    assert load_config(environ={}, cache_dir="~/python").cache_dir == str(site / "home" / "python")

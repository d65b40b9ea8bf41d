"""Configuration from pyproject.toml, lamina.toml and LAMINA_* variables."""

import pytest

from lamina.core.config import load_config
from lamina.core.errors import ConfigError


def test_pyproject_table_is_read_from_a_parent_folder(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.lamina]\nschedule = "generic"\ndisable = ["x"]\n[tool.lamina.knobs]\nblock_k = 32\n')
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    config = load_config(start=nested, environ={})
    assert (config.schedule, config.disable, config.knobs) == ("generic", ("x",), {"block_k": 32})
    assert config.source == str(tmp_path / "pyproject.toml")


def test_lamina_toml_wins_over_a_pyproject_without_a_lamina_table(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    (tmp_path / "lamina.toml").write_text('target = "sm_80"\n')
    assert load_config(start=tmp_path, environ={}).target == "sm_80"


def test_environment_overrides_the_file(tmp_path):
    (tmp_path / "lamina.toml").write_text('schedule = "generic"\nstrict_plugins = false\n')
    env = {"LAMINA_SCHEDULE": "contraction", "LAMINA_STRICT_PLUGINS": "1",
           "LAMINA_PLUGINS": "a, b", "LAMINA_KNOB_BLOCK_M": "64"}
    config = load_config(start=tmp_path, environ=env)
    assert config.schedule == "contraction"
    assert config.strict_plugins is True
    assert config.plugins == ("a", "b")
    assert config.knobs == {"block_m": 64}


def test_knobs_from_the_environment_are_numbers_booleans_or_text(tmp_path):
    env = {"LAMINA_KNOB_BLOCK_M": "64", "LAMINA_KNOB_EARLY_READS": "false", "LAMINA_KNOB_ROW_IN_REGISTERS": "True",
           "LAMINA_KNOB_SPLIT": "0.5", "LAMINA_KNOB_ORDER": "rows"}
    knobs = load_config(start=tmp_path, environ=env).knobs
    assert knobs == {"block_m": 64, "early_reads": False, "row_in_registers": True, "split": 0.5, "order": "rows"}


def test_unknown_setting_is_an_error_that_names_the_file(tmp_path):
    (tmp_path / "lamina.toml").write_text('schedul = "generic"\n')
    with pytest.raises(ConfigError, match=r"lamina.toml: unknown setting 'schedul'"):
        load_config(start=tmp_path, environ={})


def test_wrong_type_is_an_error(tmp_path):
    (tmp_path / "lamina.toml").write_text('disable = "x"\n')
    with pytest.raises(ConfigError, match="disable must be a list of strings"):
        load_config(start=tmp_path, environ={})

"""Configuration from pyproject.toml, lamina.toml and LAMINA_* variables."""

import re
import warnings
from pathlib import Path

import pytest

from lamina.core.config import load_config
from lamina.core.errors import ConfigError, ConfigWarning

#: Every setting of the README's table: its TOML value, its variable's value, and what the config then holds.
SETTINGS = {
    "plugins": ('["a", "b"]', {"LAMINA_PLUGINS": "a, b"}, ("a", "b")),
    "disable": ('["lamina.builtin.fusion"]', {"LAMINA_DISABLE_PLUGINS": "lamina.builtin.fusion"},
                ("lamina.builtin.fusion",)),
    "strict_plugins": ("true", {"LAMINA_STRICT_PLUGINS": "1"}, True),
    "strict": ("true", {"LAMINA_STRICT": "1"}, True),
    "schedule": ('"generic"', {"LAMINA_SCHEDULE": "generic"}, "generic"),
    "selection": ('"cost_model"', {"LAMINA_SELECTION": "cost_model"}, "cost_model"),
    "knobs": ("{ contraction = { block_k = 32 } }", {"LAMINA_KNOB_CONTRACTION__BLOCK_K": "32"},
              {"contraction.block_k": 32}),
    "target": ('"sm_80"', {"LAMINA_TARGET": "sm_80"}, "sm_80"),
    "backend": ('"reference"', {"LAMINA_BACKEND": "reference"}, "reference"),
    "keep": ('["aten.gelu.default"]', {"LAMINA_KEEP": "aten.gelu.default"}, ("aten.gelu.default",)),
    "cache_dir": ('"/somewhere/kernels"', {"LAMINA_CACHE_DIR": "/somewhere/kernels"}, "/somewhere/kernels"),
    "progress": ("false", {"LAMINA_PROGRESS": "0"}, False),
    "program_cache": ("false", {"LAMINA_PROGRAM_CACHE": "0"}, False),
    "cache_size_limit": ('"4 GB"', {"LAMINA_CACHE_SIZE_LIMIT": "4 GB"}, "4 GB"),
}


@pytest.mark.parametrize("source", ["lamina.toml", "pyproject.toml", "environment"])
@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_every_setting_works_from_each_source(tmp_path, setting, source):
    toml, environ, expected = SETTINGS[setting]
    if source == "lamina.toml":
        (tmp_path / "lamina.toml").write_text(f"{setting} = {toml}\n")
    elif source == "pyproject.toml":
        (tmp_path / "pyproject.toml").write_text(f"[tool.lamina]\n{setting} = {toml}\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = load_config(start=tmp_path, environ=environ if source == "environment" else {})
    assert getattr(config, setting) == expected


def test_every_setting_of_the_readme_is_tested():
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    table = readme[readme.index("| setting | variable |"):].split("\n\n")[0]
    assert set(re.findall(r"^\| `(\w+)` \|", table, re.MULTILINE)) == set(SETTINGS)


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


def test_an_unknown_setting_names_the_closest(tmp_path):
    (tmp_path / "lamina.toml").write_text('cache-dr = "x"\n')
    with pytest.raises(ConfigError, match=r"unknown setting 'cache_dr' \(did you mean 'cache_dir'\?\)"):
        load_config(start=tmp_path, environ={})


def test_an_unknown_variable_warns_naming_the_closest(tmp_path):
    with pytest.warns(ConfigWarning, match=r"LAMINA_CACHEDIR is not a lamina setting and does nothing "
                                           r"\(did you mean 'LAMINA_CACHE_DIR'\?\)"):
        config = load_config(start=tmp_path, environ={"LAMINA_CACHEDIR": "/x"})
    assert config.cache_dir != "/x"


def test_a_file_that_is_not_utf8_is_a_config_error(tmp_path):
    (tmp_path / "lamina.toml").write_bytes(b'schedule = "gen\xe9ric"\n')
    with pytest.raises(ConfigError, match=r"lamina.toml is not valid TOML: it is not UTF-8 text \(byte 0xe9 at offset 15\)"):
        load_config(start=tmp_path, environ={})


def test_a_bad_boolean_names_its_variable(tmp_path):
    with pytest.raises(ConfigError, match=r"^LAMINA_STRICT_PLUGINS: expected 1 or 0, got 'maybe'"):
        load_config(start=tmp_path, environ={"LAMINA_STRICT_PLUGINS": "maybe"})

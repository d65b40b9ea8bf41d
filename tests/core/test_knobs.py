"""Knobs pinned per schedule: how they are spelled, and which schedule or fusion rule receives each."""

import warnings

import pytest

from lamina.core.config import Config, load_config
from lamina.core.errors import ConfigError, ConfigWarning, PluginError
from lamina.core.knobs import environment_name, sort_out, warn_unused


class Provider:
    def __init__(self, name, knob_names=None, knob_namespace=None):
        self.name = name
        if knob_names is not None:
            self.knob_names = knob_names
        if knob_namespace is not None:
            self.knob_namespace = knob_namespace


TILED = Provider("tiled", ("block_k", "threads"))
ROWS = Provider("rows", ("threads", "rows_per_block"))
OLD = Provider("old")
SPLIT = Provider("split_across_blocks", ("split_k", "block_k"), knob_namespace="tiled")
PROVIDERS = {"schedule": [TILED, ROWS, OLD], "fusion_rule": [SPLIT, Provider("inline")]}


def sorted_out(knobs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return sort_out(Config(knobs=knobs).knobs, PROVIDERS)


def test_a_knob_pinned_for_a_schedule_reaches_only_that_schedule():
    knobs = sorted_out({"rows.threads": 64})
    assert knobs["schedule"] == {"tiled": {}, "rows": {"threads": 64}, "old": {}}
    assert knobs["fusion_rule"] == {"split_across_blocks": {}, "inline": {}}


def test_a_fusion_rule_sharing_a_schedules_namespace_receives_the_knobs_it_declares():
    knobs = sorted_out({"tiled": {"split_k": 3, "block_k": 32, "threads": 128}})
    assert knobs["schedule"]["tiled"] == {"block_k": 32, "threads": 128}
    assert knobs["fusion_rule"]["split_across_blocks"] == {"split_k": 3, "block_k": 32}


def test_a_knob_without_a_schedule_pins_every_taker_and_warns_with_the_spellings_to_use():
    with pytest.warns(FutureWarning, match=r"rows\.threads, tiled\.threads .*LAMINA_KNOB_ROWS__THREADS"):
        knobs = sort_out(Config(knobs={"threads": 128}).knobs, PROVIDERS)
    assert knobs["schedule"] == {"tiled": {"threads": 128}, "rows": {"threads": 128}, "old": {"threads": 128}}
    assert knobs["fusion_rule"] == {"split_across_blocks": {}, "inline": {"threads": 128}}


def test_a_knob_pinned_for_its_schedule_wins_over_the_same_knob_without_one():
    with pytest.warns(FutureWarning):
        knobs = sort_out(Config(knobs={"threads": 128, "rows.threads": 64}).knobs, PROVIDERS)
    assert (knobs["schedule"]["tiled"], knobs["schedule"]["rows"]) == ({"threads": 128}, {"threads": 64})


def test_a_knob_without_a_schedule_that_nothing_declares_warns_that_it_does_nothing():
    with pytest.warns(ConfigWarning, match=r"does nothing: no schedule or fusion rule declares a knob 'blok_k'; "
                                           r"the closest is tiled\.block_k \(LAMINA_KNOB_TILED__BLOCK_K\)\."):
        sort_out({"blok_k": 32}, PROVIDERS)


def test_a_knob_without_a_schedule_like_none_warns_without_a_guess():
    with pytest.warns(ConfigWarning, match=r"declares a knob 'not_a_knob'\. Knobs are pinned as"):
        sort_out({"not_a_knob": 3}, PROVIDERS)


def test_a_knob_for_an_unknown_schedule_is_an_error_listing_the_knobs():
    with pytest.raises(ConfigError, match=r"knob tiles\.block_k: no schedule or fusion rule is named 'tiles'.*"
                                          r"rows\.\{rows_per_block, threads\}; tiled\.\{block_k, split_k, threads\}"):
        sorted_out({"tiles.block_k": 32})


def test_a_knob_the_schedule_does_not_take_is_an_error_naming_its_knobs():
    with pytest.raises(ConfigError, match=r"knob rows\.block_k: rows takes no knob 'block_k' \(did you mean "
                                          r"'tiled\.block_k'\?\); its knobs: rows_per_block, threads$"):
        sorted_out({"rows.block_k": 32})
    with pytest.raises(ConfigError, match=r"old takes no knob 'threads' \(did you mean 'tiled\.threads'\?\); its knobs: none \(schedule old declares no knob_names"):
        sorted_out({"old.threads": 32})


def test_a_misspelt_knob_or_schedule_is_an_error_naming_the_closest():
    with pytest.raises(ConfigError, match=r"rows takes no knob 'thread' \(did you mean 'threads'\?\)"):
        sorted_out({"rows.thread": 32})
    with pytest.raises(ConfigError, match=r"no schedule or fusion rule is named 'tiledd' \(did you mean 'tiled\.block_k'\?\)"):
        sorted_out({"tiledd.block_k": 32})


def test_toml_takes_dotted_keys_tables_and_names_without_a_schedule(tmp_path):
    (tmp_path / "lamina.toml").write_text(
        "[knobs]\nthreads = 128\ncontraction.block_k = 32\n[knobs.row_reduction]\nthreads = 64\n"
    )
    knobs = load_config(start=tmp_path, environ={}).knobs
    assert knobs == {"threads": 128, "contraction.block_k": 32, "row_reduction.threads": 64}


def test_the_pyproject_table_takes_a_subtable_per_schedule(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.lamina.knobs.contraction]\nblock_k = 32\nsplit_k = 2\n")
    assert load_config(start=tmp_path, environ={}).knobs == {"contraction.block_k": 32, "contraction.split_k": 2}


def test_the_environment_separates_schedule_and_knob_with_a_double_underscore(tmp_path):
    (tmp_path / "lamina.toml").write_text("[knobs.contraction]\nblock_k = 32\nblock_m = 64\n")
    env = {"LAMINA_KNOB_CONTRACTION__BLOCK_K": "16", "LAMINA_KNOB_MATMUL_ROW_REDUCTION__ROW_COMBINE": "cluster",
           "LAMINA_KNOB_THREADS": "128"}
    knobs = load_config(start=tmp_path, environ=env).knobs
    assert knobs == {"contraction.block_k": 16, "contraction.block_m": 64, "matmul_row_reduction.row_combine": "cluster",
                     "threads": 128}
    assert environment_name("matmul_row_reduction.row_combine") == "LAMINA_KNOB_MATMUL_ROW_REDUCTION__ROW_COMBINE"


@pytest.mark.parametrize("variable", ["LAMINA_KNOB_A__B__C", "LAMINA_KNOB_CONTRACTION__", "LAMINA_KNOB___BLOCK_K"])
def test_a_malformed_variable_is_an_error_that_shows_the_spelling(tmp_path, variable):
    with pytest.raises(ConfigError, match=rf"{variable}: expected LAMINA_KNOB_<SCHEDULE>__<KNOB>"):
        load_config(start=tmp_path, environ={variable: "1"})


def test_a_table_nested_too_deep_is_an_error_that_names_the_file(tmp_path):
    (tmp_path / "lamina.toml").write_text("[knobs.contraction.tiles]\nblock_k = 32\n")
    with pytest.raises(ConfigError, match=r"lamina.toml: knob 'contraction.tiles'"):
        load_config(start=tmp_path, environ={})


def test_python_callers_may_pass_tables_or_dotted_names():
    assert Config(knobs={"contraction": {"block_k": 32}, "pointwise.threads": 64}).knobs == {
        "contraction.block_k": 32, "pointwise.threads": 64}


@pytest.mark.parametrize("names", ["threads", ("tiled.threads",), ("block__k",), (32,)])
def test_a_provider_must_declare_a_tuple_of_plain_knob_names(names):
    with pytest.raises(PluginError, match=r"broken: knob_names must be a tuple of knob names"):
        sort_out({}, {"schedule": [Provider("broken", names)]})


def unused(knobs, chosen, providers=PROVIDERS):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_unused(Config(knobs=knobs).knobs, providers, chosen)
    return [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]


def test_a_pin_no_chosen_schedule_received_warns_with_the_kernels_schedules():
    assert unused({"tiled.block_k": 32}, [ROWS, ROWS, OLD]) == [
        "knob tiled.block_k = 32 was pinned, but no kernel of this program was scheduled by tiled "
        "(its kernels: 2 x rows, 1 x old); the pin has no effect"]
    assert unused({"tiled.block_k": 32}, []) == [
        "knob tiled.block_k = 32 was pinned, but no kernel of this program was scheduled by tiled "
        "(its kernels: none); the pin has no effect"]
    assert unused({"tiled.block_k": 32, "rows.threads": 8}, [ROWS, TILED]) == []


def test_a_fusion_rules_knob_counts_for_the_schedule_whose_name_it_is_pinned_under():
    assert len(unused({"tiled.split_k": 2}, [ROWS])) == 1
    assert unused({"tiled.split_k": 2}, [TILED]) == []


def test_a_knob_of_a_fusion_rule_in_its_own_namespace_is_always_received():
    fusing = Provider("fusing", ("depth",))
    providers = {"schedule": [TILED, ROWS], "fusion_rule": [fusing]}
    assert unused({"fusing.depth": 2}, [ROWS], providers) == []


def test_a_bare_knob_is_received_by_a_chosen_schedule_that_takes_it_or_declares_none():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        assert unused({"threads": 64}, [ROWS]) == []
        assert unused({"threads": 64}, [OLD]) == []
        (message,) = unused({"rows_per_block": 2}, [TILED])
    assert "scheduled by rows (its kernels: 1 x tiled)" in message


def test_under_strict_a_pin_no_kernel_received_is_an_error():
    with pytest.raises(ConfigError, match=r"knob tiled\.block_k = 32 was pinned.*\n\(strict is set"):
        warn_unused({"tiled.block_k": 32}, PROVIDERS, [ROWS], strict=True)


def test_under_strict_a_knob_nothing_declares_is_an_error():
    with pytest.raises(ConfigError, match=r"the knob not_a_knob does nothing"):
        sort_out({"not_a_knob": 3}, PROVIDERS, strict=True)

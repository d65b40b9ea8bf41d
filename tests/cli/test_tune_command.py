"""``lamina tune``: the database carried between machines, its report, and what needs a GPU."""

import json
import os

import pytest
import torch

from lamina.bench.report import reproducing_command
from lamina.cli.bench_command import command_words, model_command_words
from lamina.cli.main import build_parser, main
from lamina.contrib.autotune.database import Entry, Measured, TuningDatabase
from lamina.contrib.autotune.provenance import driver_version
from lamina.core.version import __version__


@pytest.fixture
def database(tmp_path, monkeypatch):
    monkeypatch.setenv("LAMINA_CACHE_DIR", str(tmp_path / "cache"))
    return TuningDatabase(tmp_path / "cache" / "tuning.json")


def entry(kernel: str, times: list[float], winner: int) -> Entry:
    knobs = [{"block_m": 64, "block_n": 64}, {"block_m": 128, "block_n": 64}, {"block_m": 128, "block_n": 128}]
    return Entry(kernel, "sm_90", __version__, driver_version(), None,
                 [Measured("contraction", k, 10.0 + i, t) for i, (k, t) in enumerate(zip(knobs, times))], winner)


def test_export_then_import_carries_the_tuned_kernels(database, tmp_path, capsys):
    database.put({"a": entry("mm", [12.0, 9.0, 11.0], 1), "b": entry("bmm", [5.0, 6.0, 7.0], 0)})
    assert main(["tune", "--export", str(tmp_path / "h200.json")]) == 0
    assert "wrote 2 tuned kernel(s)" in capsys.readouterr().out
    database.path.unlink()
    assert main(["tune", "--import", str(tmp_path / "h200.json")]) == 0
    assert "added 2 tuned kernel(s)" in capsys.readouterr().out
    assert sorted(database.entries()) == ["a", "b"]


def test_importing_what_is_not_a_database_is_one_clear_message(database, tmp_path, capsys):
    (tmp_path / "other.json").write_text(json.dumps({"format": "another-tool"}))
    assert main(["tune", "--import", str(tmp_path / "other.json")]) == 2
    assert "is not a lamina tuning database: it is not a lamina-tuning-database" in capsys.readouterr().err


def test_the_report_says_where_the_cost_model_ranked_otherwise(database, capsys):
    # Estimates rank the candidates 0 < 1 < 2; measured, 1 < 2 < 0 and 0 < 1 < 2.
    database.put({"a": entry("mm", [12.0, 9.0, 11.0], 1), "b": entry("bmm", [5.0, 6.0, 7.0], 0)})
    assert main(["tune", "--report"]) == 0
    out = capsys.readouterr().out
    assert "2 tuned kernel(s), 2 measured with this lamina and driver" in out
    # block_m differs in (0,1) and (0,2): mm ranks both otherwise, bmm neither.
    assert [line.split() for line in out.splitlines() if line.startswith("contraction")] == [
        ["contraction", "block_m", "4", "2", "(", "50", "%)"], ["contraction", "block_n", "4", "1", "(", "25", "%)"]]
    assert "measured / estimated time, median per schedule: contraction 0.70 (6 candidates)" in out


def test_tuning_needs_a_gpu(database, capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: tuning would run")
    assert main(["tune", "-c", "x @ w", "--input", "x=8,8", "--input", "w=8,8"]) == 2
    assert "lamina tune measures each kernel's candidates on a GPU, and PyTorch sees none" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["tune", "--report", "--model", "tinyllama"], "give one of --export, --import, --report, or a program"),
    (["tune", "--seq", "128"], "--seq and --layers choose what --model builds"),
    (["tune", "--model", "tinyllama", "--models"], "--model, --models: tune one kind of program at once"),
    (["tune", "--filter", "llama"], "--filter picks cases of --models or --kernels"),
    (["tune", "--models", "--kernels"], "--models, --kernels: tune one kind of program at once"),
    (["tune", "--candidates", "1"], "tuning compares at least 2 settings per kernel"),
])
def test_arguments_that_do_not_go_together_are_one_clear_message(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_plugins_lists_the_autotuner_as_off_and_how_to_turn_it_on(capsys):
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "lamina.contrib.autotune" in out and "[off]" in out
    assert "opt-in: loaded where the configuration says selection = 'autotune'" in out


def test_bench_records_the_selection_it_ran_with():
    args = build_parser().parse_args(["bench", "--filter", "qwen", "--selection", "autotune"])
    assert reproducing_command(command_words(args)) == "lamina bench --filter qwen --selection autotune"
    args = build_parser().parse_args(["bench", "--models", "--selection", "autotune", "--out", os.path.abspath("m.json")])
    assert reproducing_command(model_command_words(args)) == "lamina bench --models --out m.json --selection autotune"


def test_cache_info_shows_the_tuning_database_and_clear_leaves_it(database, capsys):
    database.put({"a": entry("mm", [12.0, 9.0, 11.0], 1)})
    assert main(["cache", "info"]) == 0
    assert "tuning database: tuning.json, 1 tuned kernel(s) (lamina tune)" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0
    assert list(database.entries()) == ["a"]

"""The tuning database: entries written and read back, by another process too; a file that is not
one ignored with a warning, refused by an import; two processes writing at once both kept."""

import json
import multiprocessing
import subprocess
import sys

import pytest

from lamina.contrib.autotune.database import (FORMAT, Entry, Measured, TuningDatabase, TuningDatabaseWarning,
                                              read_entries)
from lamina.core.errors import LaminaError


def entry(kernel: str = "mm", winner: int = 1, lamina: str = "0.1.0") -> Entry:
    return Entry(kernel, "sm_90", lamina, "12080", "NVIDIA H200", [
        Measured("contraction", {"block_m": 64}, 10.0, 14.0),
        Measured("contraction", {"block_m": 128}, 11.0, 9.5),
        Measured("contraction", {"block_m": 32}, 12.0, None, "its out differs from the cost model's choice's by 0.5"),
    ], winner)


def test_entries_are_read_back_as_written(tmp_path):
    database = TuningDatabase(tmp_path / "tuning.json")
    assert database.entries() == {}
    database.put({"a": entry("mm")})
    database.put({"b": entry("bmm", winner=0)})
    again = TuningDatabase(tmp_path / "tuning.json").entries()
    assert again == {"a": entry("mm"), "b": entry("bmm", winner=0)}
    assert again["a"].chosen.knobs == {"block_m": 128} and again["a"].cost_models.time_us == 14.0


def test_a_database_written_by_one_process_is_read_by_another(tmp_path):
    TuningDatabase(tmp_path / "tuning.json").put({"a": entry()})
    code = ("import sys; from lamina.contrib.autotune.database import TuningDatabase; "
            "e = TuningDatabase(sys.argv[1]).entries()['a']; print(e.kernel, e.chosen.time_us)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "tuning.json")], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["mm", "9.5"]


@pytest.mark.parametrize("content", [
    b"{\"format\": \"lamina-tuning-database\", \"version\": 1, \"entries\": {\"a\": {\"kern",  # truncated
    b"\x00\xff garbage",
    json.dumps({"format": "someone-elses", "entries": {}}).encode(),
    json.dumps({"format": FORMAT, "version": 99, "entries": {}}).encode(),
    json.dumps({"format": FORMAT, "version": 1, "entries": {"a": {"kernel": "mm"}}}).encode(),
], ids=["truncated", "not-text", "foreign", "newer-format", "entry-without-candidates"])
def test_a_file_that_is_not_a_tuning_database_is_ignored_with_a_warning_and_replaced(tmp_path, content):
    path = tmp_path / "tuning.json"
    path.write_bytes(content)
    database = TuningDatabase(path)
    with pytest.warns(TuningDatabaseWarning, match="is ignored"):
        assert database.entries() == {}
    with pytest.warns(TuningDatabaseWarning):
        database.put({"a": entry()})
    assert read_entries(path) == {"a": entry()}


def test_export_and_import_carry_the_entries(tmp_path):
    source = TuningDatabase(tmp_path / "here" / "tuning.json")
    source.put({"a": entry("mm"), "b": entry("bmm")})
    assert source.export(tmp_path / "h200.json") == 2
    other = TuningDatabase(tmp_path / "there" / "tuning.json")
    other.put({"c": entry("addmm")})
    assert other.import_from(tmp_path / "h200.json") == 2
    assert sorted(other.entries()) == ["a", "b", "c"]


def test_importing_a_file_that_is_not_a_database_is_an_error(tmp_path):
    (tmp_path / "notes.json").write_text("[1, 2, 3]")
    database = TuningDatabase(tmp_path / "tuning.json")
    with pytest.raises(LaminaError, match="is not a lamina tuning database"):
        database.import_from(tmp_path / "notes.json")
    with pytest.raises(LaminaError, match="there is no tuning database"):
        database.import_from(tmp_path / "missing.json")
    assert not (tmp_path / "tuning.json").exists()


def _write_many(path: str, prefix: str) -> None:
    database = TuningDatabase(path)
    for i in range(20):
        database.put({f"{prefix}{i}": entry(f"{prefix}{i}")})


def test_two_processes_writing_at_once_both_keep_their_entries(tmp_path):
    path = str(tmp_path / "tuning.json")
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_write_many, args=(path, prefix)) for prefix in "ab"]
    for w in writers:
        w.start()
    for w in writers:
        w.join(60)
        assert w.exitcode == 0
    assert sorted(TuningDatabase(path).entries()) == sorted(f"{p}{i}" for p in "ab" for i in range(20))

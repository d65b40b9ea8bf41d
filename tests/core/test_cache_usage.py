"""The caches under the cache directory: their size, a size limit that removes the entries used
longest ago, and ``lamina cache info`` / ``lamina cache clear``."""

import os

import pytest
import torch

import lamina
from lamina.cli.main import main
from lamina.core import cache_usage
from lamina.core.config import Config
from lamina.core.errors import ConfigError
from lamina.core.program_cache import ProgramCache


def entry(root, folder, name, size, used):
    path = root / folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    os.utime(path, (used, used))
    return path


@pytest.mark.parametrize("text, size", [("1000", 1000), ("4 GB", 4 * 10 ** 9), ("500MiB", 500 * 2 ** 20),
                                        ("1.5 kB", 1500), (" 2 tib ", 2 * 2 ** 40)])
def test_sizes_are_read_with_their_units(text, size):
    assert cache_usage.parse_size(text) == size


@pytest.mark.parametrize("text", ["lots", "4 GBs", "-1 GB", ""])
def test_anything_else_is_a_config_error_that_says_how_to_write_a_size(text):
    with pytest.raises(ConfigError, match='"500 MB" or "4 GB"'):
        Config(cache_size_limit=text)


def test_trimming_removes_the_entries_used_longest_ago_across_caches(tmp_path):
    oldest = entry(tmp_path, "cubins", "a.cubin", 400, used=1000)
    middle = entry(tmp_path, "programs", "b.pickle", 400, used=2000)
    newest = entry(tmp_path, "cubins", "c.cubin", 400, used=3000)
    being_written = entry(tmp_path, "cubins", ".c.writing", 10_000, used=0)
    assert cache_usage.usage(tmp_path) == {"cubins": (2, 800), "programs": (1, 400)}
    assert cache_usage.trim(tmp_path, 900) == (1, 400)
    assert not oldest.exists() and middle.exists() and newest.exists() and being_written.exists()
    assert cache_usage.trim(tmp_path, 0) == (2, 800)
    assert cache_usage.usage(tmp_path) == {}


def test_a_program_loaded_from_the_cache_counts_as_used_and_outlives_an_older_one(tmp_path):
    cache = ProgramCache(tmp_path)
    cache.put("a", {"program": 1})
    cache.put("b", {"program": 2})
    os.utime(cache.path("a"), (1000, 1000))
    os.utime(cache.path("b"), (2000, 2000))
    assert cache.get("a") == {"program": 1}  # used now: b is the one used longest ago
    limited = ProgramCache(tmp_path, size_limit=2 * cache.path("a").stat().st_size + 10)
    limited.put("c", {"program": 3})
    assert [cache.path(k).exists() for k in "abc"] == [True, False, True]


def test_the_program_cache_stays_under_the_configured_limit(tmp_path):
    x = torch.randn(8, 8)
    lamina.compile(lambda x: x * 2, (x,), cache_dir=str(tmp_path / "one"), program_cache=True)
    ((_, one),) = cache_usage.usage(tmp_path / "one").values()
    limit = int(2.5 * one)  # two programs of this size fit, three do not
    for k in range(3):
        lamina.compile(lambda x, k=k: x * (k + 2), (x,), cache_dir=str(tmp_path / "limited"), program_cache=True,
                       cache_size_limit=str(limit))
    count, size = cache_usage.usage(tmp_path / "limited")["programs"]
    assert count == 2 and size <= limit


def test_lamina_cache_info_and_clear(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LAMINA_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LAMINA_CACHE_SIZE_LIMIT", "2 GB")
    entry(tmp_path, "cubins", "a.cubin", 1500, used=1000)
    entry(tmp_path, "programs", "b.pickle", 2500, used=1000)
    assert main(["cache", "info"]) == 0
    printed = capsys.readouterr().out
    assert f"cache directory: {tmp_path}" in printed
    assert "cubins:" in printed and "1 entry" in printed and "1.5 kB" in printed
    assert "total:" in printed and "2 entries" in printed and "4.0 kB" in printed
    assert "size limit: 2.0 GB" in printed
    assert main(["cache", "clear"]) == 0
    assert "removed 2 entries (4.0 kB)" in capsys.readouterr().out
    assert cache_usage.usage(tmp_path) == {}

"""The on-disk cubin cache: hits, keys, atomic writes and recovery from damaged entries."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from lamina.backends.cuda import CubinCache, compile_kernel, default_cache_dir, emit_cuda, kernel_symbol
from lamina.backends.cuda.cubin_cache import ELF_MAGIC, cache_key
from tests.backends.cuda import kernels

KERNEL = kernels.elementwise(1000)
SOURCE = emit_cuda(KERNEL)
NAME = kernel_symbol(KERNEL)


def entries(root: Path) -> list[Path]:
    return sorted((root / "cubins").iterdir())


def test_the_second_compile_comes_from_the_cache(tmp_path):
    first = compile_kernel(SOURCE, NAME, cache_dir=tmp_path)
    second = compile_kernel(SOURCE, NAME, cache_dir=tmp_path)
    assert (first.from_cache, second.from_cache) == (False, True)
    assert second.cubin == first.cubin
    assert (second.registers, second.shared_bytes, second.log) == (first.registers, first.shared_bytes, first.log)
    assert [p.suffix for p in entries(tmp_path)] == [".cubin"]


def test_the_key_changes_with_source_architecture_and_options(tmp_path):
    compile_kernel(SOURCE, NAME, cache_dir=tmp_path)
    assert not compile_kernel(SOURCE, NAME, arch="sm_80", cache_dir=tmp_path).from_cache
    assert not compile_kernel(SOURCE, NAME, options=("-lineinfo",), cache_dir=tmp_path).from_cache
    assert not compile_kernel(SOURCE.replace("0.0f", "1.0f"), NAME, cache_dir=tmp_path).from_cache
    assert len(entries(tmp_path)) == 4
    assert cache_key("s", "sm_90", ("-a",), (12, 8)) != cache_key("s", "sm_90", ("-a",), (12, 9))


def test_entries_are_written_to_a_temporary_file_and_renamed_into_place(tmp_path, monkeypatch):
    renames = []
    real_replace = os.replace

    def spy(source, destination):
        assert Path(source).parent == Path(destination).parent
        assert not Path(destination).exists()
        renames.append((Path(source).name, Path(destination).name))
        real_replace(source, destination)

    monkeypatch.setattr(os, "replace", spy)
    compiled = compile_kernel(SOURCE, NAME, cache_dir=tmp_path)
    (temporary, final), = renames
    assert temporary.endswith(".tmp") and final.endswith(".cubin")
    assert [p.name for p in entries(tmp_path)] == [final]
    assert CubinCache(tmp_path).get(final.removesuffix(".cubin"))[0] == compiled.cubin


def test_a_failed_write_leaves_no_file_and_only_warns(tmp_path, monkeypatch):
    def broken(source, destination):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.warns(UserWarning, match="could not write its kernel cache"):
        compiled = compile_kernel(SOURCE, NAME, cache_dir=tmp_path)
    assert compiled.registers > 0 and not compiled.from_cache
    assert entries(tmp_path) == []


@pytest.mark.parametrize("damage", ["truncate", "garbage", "flip", "empty"])
def test_a_damaged_entry_is_ignored_and_rewritten(tmp_path, damage):
    good = compile_kernel(SOURCE, NAME, cache_dir=tmp_path)
    (path,) = entries(tmp_path)
    data = path.read_bytes()
    damaged = {
        "truncate": data[: len(data) - 100],
        "garbage": b"not a cubin at all",
        "flip": data[:-1] + bytes([data[-1] ^ 0xFF]),
        "empty": b"",
    }[damage]
    path.write_bytes(damaged)
    with pytest.warns(UserWarning, match="kernel cache entry .* is damaged"):
        again = compile_kernel(SOURCE, NAME, cache_dir=tmp_path)
    assert not again.from_cache and again.cubin == good.cubin
    cubin, report = CubinCache(tmp_path).get(path.stem)
    assert cubin == good.cubin and report["registers"] == good.registers
    assert compile_kernel(SOURCE, NAME, cache_dir=tmp_path).from_cache


def test_a_junk_body_under_a_valid_header_is_detected_warned_about_and_rebuilt(tmp_path):
    good = compile_kernel(SOURCE, NAME, cache_dir=tmp_path)
    (path,) = entries(tmp_path)
    CubinCache(tmp_path).put(path.stem, b"junk that is no cubin", {"registers": 1, "log": ""})
    with pytest.warns(UserWarning, match="is not a cubin"):
        again = compile_kernel(SOURCE, NAME, cache_dir=tmp_path)
    assert not again.from_cache and again.cubin == good.cubin
    assert compile_kernel(SOURCE, NAME, cache_dir=tmp_path).from_cache


@pytest.mark.parametrize("damage", ["report edited", "copied under another key"])
def test_the_checksum_covers_the_report_and_the_key(tmp_path, damage):
    good = compile_kernel(SOURCE, NAME, cache_dir=tmp_path)
    (path,) = entries(tmp_path)
    data = path.read_bytes()
    if damage == "report edited":
        edited = data.replace(b'"registers": %d' % good.registers, b'"registers": %d' % (good.registers + 1), 1)
        assert edited != data
        path.write_bytes(edited)
        key = path.stem
    else:
        key = "0" * 64
        CubinCache(tmp_path).path(key).write_bytes(data)
    with pytest.warns(UserWarning, match="checksum does not match"):
        assert CubinCache(tmp_path).get(key) is None


def test_an_entry_of_an_older_format_is_a_quiet_miss(tmp_path, recwarn):
    compile_kernel(SOURCE, NAME, cache_dir=tmp_path)
    (path,) = entries(tmp_path)
    path.write_bytes(b"lamina-cubin-1 {}\n" + ELF_MAGIC)
    assert not compile_kernel(SOURCE, NAME, cache_dir=tmp_path).from_cache
    assert not [w for w in recwarn if "kernel cache" in str(w.message)]


def test_concurrent_writers_and_readers_never_see_half_an_entry(tmp_path):
    cache = CubinCache(tmp_path)
    blobs = [ELF_MAGIC + bytes([n]) * (200_000 + n) for n in range(4)]
    seen, stop = [], threading.Event()

    def write(blob):
        for _ in range(20):
            cache.put("shared", blob, {"registers": len(blob)})

    def read():
        while not stop.is_set():
            entry = cache.get("shared")
            seen.append(entry is not None and entry[0] in blobs and entry[1]["registers"] == len(entry[0]))

    cache.put("shared", blobs[0], {"registers": len(blobs[0])})

    readers = [threading.Thread(target=read) for _ in range(2)]
    writers = [threading.Thread(target=write, args=(b,)) for b in blobs]
    for t in readers + writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    for t in readers:
        t.join()
    assert seen and all(seen)
    assert [p.name for p in entries(tmp_path)] == ["shared.cubin"]


def test_the_cache_directory_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("LAMINA_CACHE_DIR", str(tmp_path / "configured"))
    assert default_cache_dir() == tmp_path / "configured"
    monkeypatch.delenv("LAMINA_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "lamina"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "lamina"


@pytest.mark.parametrize("file", ["lamina.toml", "pyproject.toml"])
def test_the_cache_directory_follows_the_config_file(monkeypatch, tmp_path, file):
    table = "" if file == "lamina.toml" else "[tool.lamina]\n"
    (tmp_path / file).write_text(f'{table}cache_dir = "{tmp_path / "from-file"}"\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LAMINA_CACHE_DIR")
    assert default_cache_dir() == tmp_path / "from-file"
    compile_kernel(SOURCE, NAME)
    assert len(entries(tmp_path / "from-file")) == 1
    monkeypatch.setenv("LAMINA_CACHE_DIR", str(tmp_path / "from-environment"))
    assert default_cache_dir() == tmp_path / "from-environment"


def test_without_a_directory_the_environment_decides(monkeypatch, tmp_path):
    monkeypatch.setenv("LAMINA_CACHE_DIR", str(tmp_path))
    compile_kernel(SOURCE, NAME)
    assert compile_kernel(SOURCE, NAME).from_cache
    assert len(entries(tmp_path)) == 1

"""What lamina's caches hold on disk, and keeping them under a size limit.

The cache directory (``Config.cache_dir``) has a folder per cache: ``captures`` (captured
modules, ``lamina.frontends.torch.capture_cache``), ``programs`` (the program cache),
``kernel-sources`` (the CUDA sources of each cached program's kernels) and ``cubins`` (the CUDA
backend's kernels). An entry is a file of its own: a header line
(the cache's format, a space, its own description of the body, such as its length and checksum)
and the body (``read_entry``), written to a temporary file whose name starts with a dot and
renamed into place (``write_atomically``), so that a reader, in any process, sees a whole entry or
none. A cache reads an entry's modification time as
its last use: it touches the entry when it loads it (``mark_used``), so that ``trim`` removes
the entries used longest ago first. The caches trim after each write where the configuration
sets ``cache_size_limit``; ``lamina cache info`` and ``lamina cache clear`` show and empty them.
An entry may be written from a thread of its own (``in_background``): this process's readers
of the caches wait for it.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
from pathlib import Path
from typing import Callable

import attrs

from lamina.core.errors import ConfigError

_UNITS = {"": 1, "b": 1, "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12,
          "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*\Z")


def parse_size(text: str) -> int:
    """Bytes from ``"4 GB"``, ``"500MiB"`` or ``"1000000"``; a ``ConfigError`` for anything else."""
    found = _SIZE.match(str(text))
    unit = found.group(2).lower() if found else ""
    if found is None or unit not in _UNITS:
        raise ConfigError(f"cache_size_limit {text!r} is not a size: write a number of bytes, or one with a unit "
                          "such as \"500 MB\" or \"4 GB\" (KB, MB, GB, TB; KiB, MiB, GiB, TiB)")
    return int(float(found.group(1)) * _UNITS[unit])


@attrs.frozen
class Entry:
    path: Path
    bytes: int
    last_used: float


def in_background(path: Path, write: Callable[[], None]) -> None:
    """Run ``write`` (which writes the entry at ``path``) in a thread of its own, which Python waits
    for before it exits: a model's program takes a fraction of a second to pickle, which the
    compile spends compiling its kernels meanwhile (NVRTC releases Python's lock)."""
    thread = threading.Thread(target=write, name=f"lamina cache write {path.name}")
    with _writing_lock:
        _writing[path] = thread
    thread.start()


def finish_writes(path: Path | None = None) -> None:
    """Wait for the background write of the entry at ``path`` (of every entry, without one)."""
    with _writing_lock:
        threads = [_writing.pop(path, None)] if path is not None else [_writing.pop(p) for p in list(_writing)]
    for thread in threads:
        if thread is not None and thread is not threading.current_thread():
            thread.join()


_writing: dict[Path, threading.Thread] = {}
_writing_lock = threading.Lock()


def entries(root: Path | str) -> list[Entry]:
    """Every entry of every cache under ``root``, in no particular order."""
    finish_writes()
    found = []
    for folder in Path(root).glob("*"):
        if not folder.is_dir():
            continue
        for path in folder.iterdir():
            if path.name.startswith("."):
                continue
            try:
                status = path.stat()
            except OSError:  # removed by another process meanwhile
                continue
            if path.is_file():
                found.append(Entry(path, status.st_size, status.st_mtime))
    return found


def usage(root: Path | str) -> dict[str, tuple[int, int]]:
    """Entries and bytes of each cache (folder name) under ``root``."""
    out: dict[str, tuple[int, int]] = {}
    for entry in entries(root):
        count, size = out.get(entry.path.parent.name, (0, 0))
        out[entry.path.parent.name] = (count + 1, size + entry.bytes)
    return out


def read_entry(path: Path) -> tuple[bytes, bytes, bytes] | None:
    """The format, the description and the body of the entry at ``path``; None where there is none."""
    finish_writes(path)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    header, _, body = data.partition(b"\n")
    prefix, _, meta = header.partition(b" ")
    return prefix, meta, body


def write_atomically(path: Path, data: bytes) -> None:
    """``data`` into ``path`` through a temporary file in its folder, renamed into place; an
    ``OSError`` where the folder cannot be written (the temporary file removed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem[:16]}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as f:
            f.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def mark_used(path: Path) -> None:
    """Note that ``path`` was just used; a cache that cannot be touched only loses that order."""
    try:
        os.utime(path)
    except OSError:
        pass


def _remove(chosen: list[Entry]) -> tuple[int, int]:
    count = size = 0
    for entry in chosen:
        try:
            entry.path.unlink()
        except OSError:  # removed by another process, or not ours to remove
            continue
        count, size = count + 1, size + entry.bytes
    return count, size


def clear(root: Path | str) -> tuple[int, int]:
    """Remove every entry under ``root``: the entries and bytes removed."""
    return _remove(entries(root))


def trim(root: Path | str, limit: int) -> tuple[int, int]:
    """Remove the entries used longest ago until those under ``root`` take at most ``limit``
    bytes: the entries and bytes removed."""
    found = sorted(entries(root), key=lambda e: e.last_used)
    excess = sum(e.bytes for e in found) - limit
    chosen = []
    for entry in found:
        if excess <= 0:
            break
        chosen.append(entry)
        excess -= entry.bytes
    return _remove(chosen)

"""The tuning database: what measuring found for each kernel, in one JSON file.

An entry is keyed by the kernel's structure (its Loop IR with names erased, the sizes a symbolic
one was tuned at) and its target; it records the lamina version, the CUDA driver and the GPU it was
measured with, the winner and the cost model's choice with their times, and every candidate. A
compile uses an entry only where lamina's version and the driver are this process's: another's
measurements may no longer describe the kernels this code emits.

The file is written whole to a temporary file and renamed over the old one, under a lock, after
reading and merging what other processes wrote meanwhile; two processes tuning at once both keep
their entries. A file that is not a tuning database (corrupt, truncated, another program's, a
newer format) is ignored with a warning and replaced at the next write; ``lamina tune --import``
refuses it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import warnings
from pathlib import Path
from typing import Any, Iterator, Mapping

import attrs

from lamina.core.cache_usage import write_atomically
from lamina.core.errors import LaminaError

FORMAT = "lamina-tuning-database"
FORMAT_VERSION = 1
FILE_NAME = "tuning.json"
"""Its name in the cache directory (``LAMINA_CACHE_DIR``), beside the caches' folders: ``lamina cache
clear`` and the size limit leave it, since what it holds took minutes of measuring."""


class TuningDatabaseWarning(UserWarning):
    """A tuning database could not be read and is ignored."""


@attrs.frozen
class Measured:
    """One candidate as it was measured: its schedule and knobs, the cost model's estimate, and its
    median time (None where it could not run or disagreed with the cost model's choice: ``problem``)."""

    schedule: str
    knobs: Mapping[str, Any]
    estimate_us: float
    time_us: float | None
    problem: str | None = None


@attrs.frozen
class Entry:
    """What tuning found for one kernel. ``candidates[0]`` is the cost model's choice; ``winner``
    indexes the fastest."""

    kernel: str
    target: str
    lamina: str
    driver: str | None
    device: str | None
    candidates: tuple[Measured, ...] = attrs.field(converter=tuple)
    winner: int = 0

    @property
    def chosen(self) -> Measured:
        return self.candidates[self.winner]

    @property
    def cost_models(self) -> Measured:
        return self.candidates[0]


def entry_to_json(entry: Entry) -> dict[str, Any]:
    return attrs.asdict(entry, recurse=True)


def entry_from_json(data: Mapping[str, Any]) -> Entry:
    """An entry read back (a ``ValueError`` where ``data`` is not one)."""
    try:
        candidates = tuple(Measured(**c) for c in data["candidates"])
        entry = Entry(**{**data, "candidates": candidates})
    except (KeyError, TypeError) as e:
        raise ValueError(f"not a tuning entry: {e}") from None
    if not candidates or not 0 <= entry.winner < len(candidates) or entry.chosen.time_us is None:
        raise ValueError("a tuning entry without a measured winner")
    return entry


class TuningDatabase:
    """The entries in the file at ``path`` (which need not exist yet)."""

    def __init__(self, path: Path | str):
        self.path = Path(path)

    def entries(self) -> dict[str, Entry]:
        """Every entry the file holds, by key; none, with a warning, where it cannot be read."""
        try:
            return read_entries(self.path)
        except FileNotFoundError:
            return {}
        except ValueError as e:
            warnings.warn(f"the tuning database {self.path} is ignored: {e}. The next tuning replaces it.",
                          TuningDatabaseWarning, stacklevel=2)
            return {}

    def digest(self) -> str:
        """Changes whenever the file does: programs compiled with its choices are cached under it."""
        try:
            return hashlib.sha256(self.path.read_bytes()).hexdigest()
        except FileNotFoundError:
            return "none"

    def put(self, entries: Mapping[str, Entry]) -> None:
        """Adds ``entries`` (replacing those of the same keys), keeping what others wrote meanwhile."""
        with self._locked():
            merged = self.entries()
            merged.update(entries)
            write_entries(self.path, merged)

    def export(self, path: Path | str) -> int:
        """Writes every readable entry to ``path`` (a file to copy to a machine of the same kind);
        returns how many."""
        entries = self.entries()
        write_entries(Path(path), entries)
        return len(entries)

    def import_from(self, path: Path | str) -> int:
        """Merges the entries of the database at ``path`` into this one; returns how many. A
        ``LaminaError`` where ``path`` is not a tuning database."""
        try:
            entries = read_entries(Path(path))
        except FileNotFoundError:
            raise LaminaError(f"there is no tuning database at {path}") from None
        except ValueError as e:
            raise LaminaError(f"{path} is not a lamina tuning database: {e}") from None
        self.put(entries)
        return len(entries)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


def read_entries(path: Path) -> dict[str, Entry]:
    """The entries of the file at ``path``: ``FileNotFoundError`` where there is none, ``ValueError``
    saying why where it is not a tuning database this lamina reads."""
    try:
        data = json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"it is not JSON ({e})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"it is not a {FORMAT}")
    if data.get("version") != FORMAT_VERSION:
        raise ValueError(f"it is format version {data.get('version')!r}; this lamina reads version {FORMAT_VERSION}")
    if not isinstance(data.get("entries"), dict):
        raise ValueError("it has no entries table")
    return {key: entry_from_json(value) for key, value in data["entries"].items()}


def write_entries(path: Path, entries: Mapping[str, Entry]) -> None:
    """Writes ``entries`` to ``path`` at once: a reader sees the old file or the new, never part of one."""
    document = {"format": FORMAT, "version": FORMAT_VERSION,
                "entries": {key: entry_to_json(entries[key]) for key in sorted(entries)}}
    write_atomically(path, json.dumps(document, indent=1, sort_keys=True).encode())

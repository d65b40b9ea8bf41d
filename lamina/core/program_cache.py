"""The on-disk cache of compiled programs: a second process skips the pipeline.

A language model's program takes tens of seconds to go through fusion, scheduling and
lowering, and the same model compiles to the same program in every process. An entry holds
every level of one ``Compilation`` (pickled), under a key that names everything the pipeline
reads: the Torch IR graph (its ops, arguments, shapes, dtypes and source lines: it holds no
tensor data, the constants being inputs read at each call), the target, the settings that
steer the compile, the versions of Python and PyTorch, and the code of lamina and of every
plugin loaded (a digest of their source files, so that an edited plugin misses). A graph that
holds something whose ``repr`` does not name it exactly (a tensor) is not cached.

An entry is one file, ``programs/<key>.pickle`` under the cache directory: a header line with
the format, the body's length and its SHA-256 with the key, then the body. It is written to a
temporary file and renamed into place; an entry that does not check out is a miss with a
warning, and the compile that follows rewrites it. Entries are Python pickles: like the kernel
cache, the cache directory must be the user's own.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import pickle
import sys
import warnings
from pathlib import Path
from typing import Any

import attrs
import torch

from lamina.core import cache_usage
from lamina.core.garbage_collection import cycle_collector_paused

FORMAT = b"lamina-program-1"
LAMINA_PACKAGE = Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=None)
def _package_digest(folder: Path) -> str:
    """SHA-256 over the paths and contents of the Python files under ``folder``."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*.py")):
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _module_folder(module: str) -> Path | None:
    """The folder of the top-level package that ``module`` belongs to (its file, if a single module)."""
    spec = importlib.util.find_spec(module.partition(":")[0].split(".")[0])
    if spec is None or spec.origin is None:
        return None
    origin = Path(spec.origin).resolve()
    return origin.parent if origin.name == "__init__.py" else origin


def code_digest(plugin_modules: tuple[str, ...]) -> str | None:
    """A digest of lamina's code and that of the plugins' packages, or None where a plugin's
    code cannot be found (then nothing is cached)."""
    digests = [_package_digest(LAMINA_PACKAGE)]
    for module in sorted(set(plugin_modules)):
        folder = _module_folder(module)
        if folder is None:
            return None
        if folder == LAMINA_PACKAGE or LAMINA_PACKAGE in folder.parents:
            continue
        if folder.is_file():
            digests.append(hashlib.sha256(folder.read_bytes()).hexdigest())
        else:
            digests.append(_package_digest(folder))
    return hashlib.sha256("\n".join(digests).encode()).hexdigest()


def _names_exactly(value: Any) -> bool:
    """Whether ``repr`` names ``value`` and everything in it exactly: no tensor, whose ``repr`` elides."""
    kind = type(value)
    if kind in _PLAIN:
        return True
    if isinstance(value, torch.Tensor):
        return False
    if isinstance(value, (tuple, list, set, frozenset)):
        return all([_names_exactly(v) for v in value])
    if isinstance(value, dict):
        return all([_names_exactly(k) and _names_exactly(v) for k, v in value.items()])
    if attrs.has(kind):
        return all([_names_exactly(getattr(value, name)) for name in _field_names(kind)])
    return True


_PLAIN = frozenset({str, int, float, bool, type(None)})
"""Values that ``repr`` names exactly, checked first: a model's graph holds tens of thousands."""


@functools.lru_cache(maxsize=None)
def _field_names(kind: type) -> tuple[str, ...]:
    return tuple(f.name for f in attrs.fields(kind))


def program_key(graph: Any, target: Any, settings: Any, code: str) -> str | None:
    """The key of a program compiled from ``graph`` for ``target`` under ``settings`` by ``code``,
    or None where the graph cannot be named exactly."""
    if not _names_exactly(graph):
        return None
    payload = "\n".join([FORMAT.decode(), repr(graph), repr(target), repr(settings), code,
                         sys.version.split()[0], torch.__version__])
    return hashlib.sha256(payload.encode()).hexdigest()


def _checksum(key: str, body: bytes) -> str:
    return hashlib.sha256(key.encode() + b"\0" + body).hexdigest()


class ProgramCache:
    """Compiled programs under ``<root>/programs`` (or another ``folder``: captured modules, under
    ``captures``); with ``size_limit``, every cache under ``root`` is trimmed to it after each
    write (``cache_usage``)."""

    def __init__(self, root: Path | str, size_limit: int | None = None, folder: str = "programs"):
        self.root, self.size_limit = Path(root), size_limit
        self.directory = self.root / folder

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.pickle"

    def get(self, key: str) -> Any | None:
        """The compilation stored under ``key``, or None if there is no sound entry."""
        path = self.path(key)
        found = cache_usage.read_entry(path)
        if found is None or found[0] != FORMAT:
            return None
        _, meta, body = found
        try:
            expected = json.loads(meta)
            sound = expected["body_bytes"] == len(body) and expected["sha256"] == _checksum(key, body)
            with warnings.catch_warnings(), cycle_collector_paused():
                # PyTorch's notices about its own pickled internals (tree specs)
                warnings.simplefilter("ignore", FutureWarning)
                compilation = pickle.loads(body) if sound else None
        except Exception as error:  # a damaged entry of any kind is a miss
            sound, compilation = False, None
            damage = f"{type(error).__name__}: {error}"
        else:
            damage = "its checksum does not match"
        if not sound:
            warnings.warn(f"lamina's program cache entry {path} is damaged ({damage}); the program is compiled "
                          "again and the entry rewritten", stacklevel=3)
        else:
            cache_usage.mark_used(path)
        return compilation

    def put_in_background(self, key: str, compilation: Any) -> None:
        """``put`` from a thread of its own (``cache_usage.in_background``); ``compilation`` must not
        change meanwhile."""
        cache_usage.in_background(self.path(key), functools.partial(self.put, key, compilation))

    def put(self, key: str, compilation: Any) -> None:
        """Store an entry atomically. A cache that cannot be written only costs a compile next time."""
        try:
            with cycle_collector_paused():
                body = pickle.dumps(compilation, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # a plugin's provider that cannot be pickled: the program is not cached
            return
        meta = json.dumps({"body_bytes": len(body), "sha256": _checksum(key, body)}, sort_keys=True)
        try:
            cache_usage.write_atomically(self.path(key), FORMAT + b" " + meta.encode() + b"\n" + body)
        except OSError:
            return
        if self.size_limit is not None:
            cache_usage.trim(self.root, self.size_limit)

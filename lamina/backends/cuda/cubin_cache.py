"""The on-disk cache of compiled kernels.

An entry is one file, ``<key>.cubin``: a header line with the format and the body's
length and SHA-256, then the body: the ptxas report as one line of JSON, then the cubin.
The checksum covers the key and every byte that is loaded, report and cubin alike, so an
entry copied under another key or a report edited in place does not check out either; the
cubin must also be an ELF file. It is written to a temporary file in the same directory and
renamed into place, so a reader sees a whole entry or none, even with several processes
compiling at once. An entry that does not check out (truncated, overwritten, junk) is a
miss with a warning, and the compile that follows rewrites it; one of an older format is
a miss without one.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path
from typing import Any, Sequence

from lamina.core import cache_usage
from lamina.core.config import load_config, user_cache_dir

FORMAT = b"lamina-cubin-2"
FORMER_FORMATS = b"lamina-cubin-"
"""Entries of other versions of the format are misses without a warning: every entry is, after an upgrade."""
ELF_MAGIC = b"\x7fELF"


def default_cache_dir() -> Path:
    """The configuration's ``cache_dir``: ``$LAMINA_CACHE_DIR``, else ``cache_dir`` in lamina.toml or
    ``[tool.lamina]``, else ``$XDG_CACHE_HOME/lamina``, else ``~/.cache/lamina``."""
    return Path(load_config().cache_dir or user_cache_dir())


def cache_key(source: str, arch: str, options: Sequence[str], nvrtc_version: Sequence[int]) -> str:
    """Everything that decides the cubin: the source, the architecture, the options, NVRTC's version."""
    payload = json.dumps(
        {"format": FORMAT.decode(), "source": source, "arch": arch,
         "options": list(options), "nvrtc": list(nvrtc_version)},
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


class CubinCache:
    """Cubins with their ptxas reports, under ``<root>/cubins``."""

    def __init__(self, root: Path | str | None = None):
        self.root = Path(root) if root is not None else default_cache_dir()
        self.directory = self.root / "cubins"

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.cubin"

    def get(self, key: str) -> tuple[bytes, dict[str, Any]] | None:
        """The cubin and report stored under ``key``, or None if there is no sound entry."""
        path = self.path(key)
        found = cache_usage.read_entry(path)
        if found is None:
            return None
        prefix, meta, body = found
        if prefix != FORMAT and prefix.startswith(FORMER_FORMATS):
            return None
        damage = _damage(key, prefix, meta, body)
        if damage is not None:
            warnings.warn(f"lamina's kernel cache entry {path} is damaged ({damage}); the kernel is compiled again "
                          "and the entry rewritten", stacklevel=3)
            return None
        report, _, cubin = body.partition(b"\n")
        cache_usage.mark_used(path)
        return cubin, json.loads(report)

    def put(self, key: str, cubin: bytes, report: dict[str, Any]) -> None:
        """Store an entry atomically. A cache that cannot be written only costs a recompile."""
        body = json.dumps(report, sort_keys=True).encode() + b"\n" + cubin
        meta = json.dumps({"body_bytes": len(body), "sha256": _checksum(key, body)}, sort_keys=True)
        try:
            cache_usage.write_atomically(self.path(key), FORMAT + b" " + meta.encode() + b"\n" + body)
        except OSError as error:
            warnings.warn(
                f"lamina could not write its kernel cache in {self.directory} ({error}); "
                "kernels will be compiled again in the next process. Set LAMINA_CACHE_DIR to a writable directory.",
                stacklevel=3,
            )


def _checksum(key: str, body: bytes) -> str:
    return hashlib.sha256(key.encode() + b"\n" + body).hexdigest()


def _damage(key: str, prefix: bytes, meta: bytes, body: bytes) -> str | None:
    """What is wrong with an entry of this format, or None if it checks out."""
    if prefix != FORMAT:
        return "no lamina header"
    try:
        info = json.loads(meta)
        size, digest = info["body_bytes"], info["sha256"]
    except (ValueError, KeyError, TypeError):
        return "unreadable header"
    if len(body) != size:
        return f"{len(body)} bytes where the header says {size}"
    if _checksum(key, body) != digest:
        return "its checksum does not match its contents or its key"
    report, newline, cubin = body.partition(b"\n")
    try:
        readable = newline and isinstance(json.loads(report), dict)
    except ValueError:
        readable = False
    if not readable:
        return "unreadable ptxas report"
    if not cubin.startswith(ELF_MAGIC):
        return "the stored kernel is not a cubin"
    return None

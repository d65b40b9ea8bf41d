"""The on-disk cache of compiled kernels.

An entry is one file, ``<key>.cubin``: a header line with the format, the ptxas
report and the cubin's length and SHA-256, then the cubin itself. It is written to a
temporary file in the same directory and renamed into place, so a reader sees a
whole entry or none, even with several processes compiling at once. An entry that
does not check out (truncated, overwritten, from another format) is a miss, and
the compile that follows rewrites it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any, Sequence

FORMAT = b"lamina-cubin-1"


def default_cache_dir() -> Path:
    """``$LAMINA_CACHE_DIR``, else ``$XDG_CACHE_HOME/lamina``, else ``~/.cache/lamina``."""
    configured = os.environ.get("LAMINA_CACHE_DIR")
    if configured:
        return Path(configured)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "lamina"


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
        try:
            data = self.path(key).read_bytes()
        except OSError:
            return None
        header, newline, cubin = data.partition(b"\n")
        prefix, _, meta = header.partition(b" ")
        if not newline or prefix != FORMAT:
            return None
        try:
            info = json.loads(meta)
            report, size, digest = info["report"], info["cubin_bytes"], info["cubin_sha256"]
        except (ValueError, KeyError, TypeError):
            return None
        if not isinstance(report, dict) or len(cubin) != size or hashlib.sha256(cubin).hexdigest() != digest:
            return None
        return cubin, report

    def put(self, key: str, cubin: bytes, report: dict[str, Any]) -> None:
        """Store an entry atomically. A cache that cannot be written only costs a recompile."""
        meta = json.dumps({"report": report, "cubin_bytes": len(cubin),
                           "cubin_sha256": hashlib.sha256(cubin).hexdigest()}, sort_keys=True)
        data = FORMAT + b" " + meta.encode() + b"\n" + cubin
        temporary = None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(dir=self.directory, prefix=f".{key[:16]}.", suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(temporary, self.path(key))
            temporary = None
        except OSError as error:
            warnings.warn(
                f"lamina could not write its kernel cache in {self.directory} ({error}); "
                "kernels will be compiled again in the next process. Set LAMINA_CACHE_DIR to a writable directory.",
                stacklevel=3,
            )
        finally:
            if temporary is not None:
                try:
                    os.unlink(temporary)
                except OSError:
                    pass

"""``lamina cache info`` and ``lamina cache clear``: what lamina keeps under its cache directory.

The directory is the configuration's ``cache_dir`` (``$LAMINA_CACHE_DIR``, ``lamina.toml``, else
the user's cache folder); each cache is a folder of it (``captures``, ``programs``, ``kernel-sources``, ``cubins``), its entries
files (``lamina.core.cache_usage``).
"""

from __future__ import annotations

from pathlib import Path

from lamina.contrib.autotune.policy import database_of
from lamina.core import cache_usage
from lamina.core.config import load_config, size_limit, user_cache_dir

_WHAT = {"captures": "captured modules (Torch IR)", "programs": "compiled programs (every IR level)",
         "kernel-sources": "compiled programs' CUDA sources", "cubins": "compiled kernels"}


def human(size: int) -> str:
    """``size`` bytes as a person reads them: ``12.3 MB``."""
    for unit, scale in (("GB", 10 ** 9), ("MB", 10 ** 6), ("kB", 10 ** 3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def _entries(count: int) -> str:
    return f"{count} entr{'y' if count == 1 else 'ies'}"


def cache_command(args) -> int:
    config = load_config()
    root = Path(config.cache_dir or user_cache_dir())
    if args.action == "clear":
        count, size = cache_usage.clear(root)
        print(f"removed {_entries(count)} ({human(size)}) from {root}")
        return 0
    usage = cache_usage.usage(root)
    limit = size_limit(config)
    print(f"cache directory: {root}")
    for folder in sorted(set(usage) | set(_WHAT)):
        count, size = usage.get(folder, (0, 0))
        print(f"  {folder + ':':16s} {_entries(count):>12s}  {human(size):>9s}  {_WHAT.get(folder, '')}".rstrip())
    count, total = sum(c for c, _ in usage.values()), sum(size for _, size in usage.values())
    print(f"  {'total:':16s} {_entries(count):>12s}  {human(total):>9s}")
    print(f"size limit: {human(limit) if limit is not None else 'none'} (cache_size_limit, LAMINA_CACHE_SIZE_LIMIT); "
          "past it, the entries used longest ago are removed")
    tuned = database_of(config)
    if tuned.path.exists():
        print(f"tuning database: {tuned.path.name}, {len(tuned.entries())} tuned kernel(s) (lamina tune); neither "
              "the limit nor lamina cache clear removes it")
    return 0

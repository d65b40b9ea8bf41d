"""The ``autotune`` selection policy: each kernel's setting from the tuning database where it holds
one measured with this lamina and this driver, else the cost model's choice; while a tuning session
runs (``lamina tune``, ``tuning.session``), a kernel the database lacks is measured first.

The Tile IR says what chose each kernel's setting (``selection: autotune, ...``), with the measured
time of the winner and of the cost model's choice.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from lamina.contrib.autotune import tuning
from lamina.contrib.autotune.database import FILE_NAME, Entry, TuningDatabase
from lamina.contrib.autotune.provenance import usable
from lamina.core.config import Config, user_cache_dir
from lamina.core.ir import loop_ir, sizes
from lamina.core.selection import Selection, SelectionContext, cheapest

NAME = "autotune"


def database_of(config: Config) -> TuningDatabase:
    """The tuning database in the configuration's cache directory."""
    return TuningDatabase(Path(config.cache_dir or user_cache_dir()) / FILE_NAME)


def kernel_key(kernel: loop_ir.Kernel, target_name: str) -> str:
    """The kernel's structure (its Loop IR with names erased; the hints of its symbolic sizes, at
    which it was measured) and its target."""
    hints = tuple(sorted(sizes.hints().items())) if loop_ir.has_symbolic_sizes(kernel) else ()
    return _structure_key(loop_ir.with_positional_names(kernel), hints, target_name)


@functools.lru_cache(maxsize=4096)
def _structure_key(kernel: loop_ir.Kernel, hints: tuple, target_name: str) -> str:
    """Printed once per distinct kernel: a model's layers repeat theirs."""
    text = loop_ir.format_kernel(kernel)
    return hashlib.sha256(f"{text}\n{list(hints)}\n{target_name}".encode()).hexdigest()


class AutotunePolicy:
    name = NAME

    def __init__(self) -> None:
        self._read: dict[Path, tuple[tuple[int, int] | None, dict[str, Entry]]] = {}

    def choose(self, kernel, candidates, target):
        """Without the pipeline's context (no database to read): the cost model's choice."""
        return cheapest(kernel, candidates, target)

    def cache_key(self, config: Config) -> str:
        return database_of(config).digest()

    def select(self, kernel: loop_ir.Kernel, candidates, context: SelectionContext) -> Selection:
        database = database_of(context.config)
        key = kernel_key(kernel, context.target.name)
        entry = self._entries(database).get(key)
        if entry is None and tuning.active() is not None:
            entry = tuning.active().tune(kernel, key, candidates, context, database)
        if entry is None:
            return Selection(self.choose(kernel, candidates, context.target),
                             note="autotune: not in the tuning database, so the cost model's choice")
        by_name = {s.name: s for s in candidates}
        chosen = entry.chosen
        if chosen.schedule not in by_name:
            return Selection(self.choose(kernel, candidates, context.target),
                             note=f"autotune: the tuned schedule {chosen.schedule} does not apply here, so the cost "
                                  "model's choice")
        measured = len([c for c in entry.candidates if c.time_us is not None])
        if entry.winner == 0:
            return Selection(self.choose(kernel, candidates, context.target),
                             note=f"autotune: the cost model's choice, measured fastest of {measured} "
                                  f"({chosen.time_us:.1f} us)")
        return Selection(by_name[chosen.schedule], chosen.knobs,
                         note=f"autotune: measured {chosen.time_us:.1f} us, the cost model's choice "
                              f"{entry.cost_models.time_us:.1f} us (fastest of {measured})")

    def _entries(self, database: TuningDatabase) -> dict[str, Entry]:
        """The usable entries of ``database``, read again only when the file changed."""
        try:
            status = database.path.stat()
            stamp = (status.st_mtime_ns, status.st_size)
        except FileNotFoundError:
            stamp = None
        read = self._read.get(database.path)
        if read is None or read[0] != stamp:
            read = self._read[database.path] = (stamp, {k: e for k, e in database.entries().items() if usable(e)})
        return read[1]

"""Fresh names that do not collide with names already taken."""

from __future__ import annotations

import itertools


def fresh_name(base: str, taken: set[str]) -> str:
    """``base`` if it is free, else ``base2``, ``base3`` ...; the name returned is added to ``taken``."""
    name = base
    for k in itertools.count(2):
        if name not in taken:
            break
        name = f"{base}{k}"
    taken.add(name)
    return name

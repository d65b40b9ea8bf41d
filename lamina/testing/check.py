"""One conformance check: a stable, readable id, the subject it is about, and how to run it.

Ids are ``key=value`` pairs joined by ``|``, most general first:
``op=aten.add.Tensor|dtype=f32|case=broadcast`` or
``schedule=contraction|program=ragged_matmul|check=races``. They are the names that
``known_failures`` lists and that the summary and its JSON report.
"""

from __future__ import annotations

from typing import Callable

import attrs


def check_id(**parts: str) -> str:
    """``key=value|key=value`` in the order given."""
    return "|".join(f"{key}={value}" for key, value in parts.items())


@attrs.frozen
class Check:
    id: str
    #: What the summary groups by: ``op=aten.add.Tensor``, ``schedule=contraction``.
    subject: str
    run: Callable[[], None] = attrs.field(eq=False, repr=False)
    #: Why the check does not apply (an undeclared capability), or None.
    skip: str | None = None
    needs_gpu: bool = False

"""Version requirements that plugins declare: ``">=0.1, <0.3"``."""

from __future__ import annotations

import operator
import re

from lamina.core.errors import PluginError

_OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "==": operator.eq, "!=": operator.ne}
_CLAUSE = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*(\d+(?:\.\d+)*)\s*$")


def _parse(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


def satisfies(version: str, requirement: str) -> bool:
    """Whether ``version`` meets every comma-separated clause of ``requirement``."""
    have = _parse(version)
    for clause in requirement.split(","):
        match = _CLAUSE.match(clause)
        if not match:
            raise PluginError(f"cannot read the version requirement {requirement!r}; write it like '>=0.1, <0.3'")
        want = _parse(match.group(2))
        width = max(len(have), len(want))
        if not _OPS[match.group(1)](have + (0,) * (width - len(have)), want + (0,) * (width - len(want))):
            return False
    return True

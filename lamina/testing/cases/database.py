"""The case database: for each ATen op, its samples, its dtypes and its PyTorch reference.

In the spirit of PyTorch's OpInfo. lamina's own ops are listed in ``builtin_ops``; a
plugin author adds an op with ``register_cases`` (or a suite's ``cases`` attribute)::

    register_cases("aten.mish.default", [Case("ragged", (T((17, 33)),), compiled=True)],
                   dtypes=("f32", "f16", "bf16"))

The reference defaults to the ATen op itself, ``torch.ops.aten.mish.default``.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import attrs
import torch

from lamina.core.errors import LaminaError
from lamina.testing.capabilities import FLOAT_DTYPES
from lamina.testing.cases.samples import Case


def aten_op(name: str) -> Callable[..., Any]:
    """``torch.ops.aten.add.Tensor`` for ``"aten.add.Tensor"``."""
    namespace, packet, overload = (name.split(".") + ["default"])[:3]
    try:
        return getattr(getattr(getattr(torch.ops, namespace), packet), overload)
    except (AttributeError, RuntimeError) as error:
        raise LaminaError(f"{name!r} is not an op PyTorch knows; pass reference= to register_cases") from error


@attrs.frozen
class OpCases:
    op: str
    cases: tuple[Case, ...] = attrs.field(converter=tuple)
    #: Every dtype the op is checked in (short names); the plugin's capabilities narrow it.
    dtypes: tuple[str, ...] = attrs.field(default=FLOAT_DTYPES, converter=tuple)
    #: The PyTorch computation to match; None: the ATen op itself.
    reference: Callable[..., Any] | None = attrs.field(default=None, eq=False)
    #: Largest error allowed relative to the largest magnitude of the result, per dtype.
    tolerance: Mapping[str, float] = attrs.field(factory=dict)

    def computation(self) -> Callable[..., Any]:
        return self.reference or aten_op(self.op)

    def dtypes_of(self, case: Case) -> tuple[str, ...]:
        return tuple(d for d in self.dtypes if case.dtypes is None or d in case.dtypes)


_DATABASE: dict[str, OpCases] = {}


def register_cases(op: str, cases: Sequence[Case], *, dtypes: Sequence[str] = FLOAT_DTYPES,
                   reference: Callable[..., Any] | None = None, tolerance: Mapping[str, float] | None = None) -> OpCases:
    """Add (or replace) the cases of ``op``, for every suite that checks it."""
    entry = as_op_cases(op, cases, dtypes=dtypes, reference=reference, tolerance=tolerance)
    _DATABASE[op] = entry
    return entry


def as_op_cases(op: str, value: Any, **settings: Any) -> OpCases:
    """``OpCases`` from what a suite's ``cases`` maps an op to: OpCases, or a list of Case."""
    if isinstance(value, OpCases):
        return value
    if isinstance(value, Case):
        value = [value]
    settings = {k: v for k, v in settings.items() if v is not None}
    return OpCases(op, tuple(value), **settings)


def cases_for(op: str) -> OpCases | None:
    """The registered cases of ``op`` (lamina's own are loaded on first use)."""
    from lamina.testing.cases import builtin_ops  # noqa: F401 - registers lamina's own cases

    return _DATABASE.get(op)


def registered_ops() -> list[str]:
    from lamina.testing.cases import builtin_ops  # noqa: F401

    return sorted(_DATABASE)

"""What a plugin declares it supports: checks outside it are skipped with a reason, never failed.

A plugin declares ``lamina_capabilities = Capabilities(...)`` (or the suite that checks it
sets ``capabilities``); the suite's attribute wins. Dtypes are short names (``f32``,
``bf16``), targets are architectures (``sm_90``).
"""

from __future__ import annotations

from typing import Any

import attrs

from lamina.core.ir import dtypes

ALL_DTYPES = tuple(d.short for d in dtypes.ALL)
FLOAT_DTYPES = tuple(d.short for d in dtypes.ALL if d.is_float)


def _short_names(values) -> tuple[str, ...]:
    return tuple(dtypes.from_name(v).short for v in values)


@attrs.frozen
class Capabilities:
    #: Element types the plugin handles; cases of other dtypes are skipped.
    dtypes: tuple[str, ...] = attrs.field(default=("f32",), converter=_short_names)
    #: Targets the plugin handles (``sm_90``); checks for other targets are skipped.
    targets: tuple[str, ...] = attrs.field(default=("sm_90",), converter=tuple)
    #: The plugin runs only on a GPU (a backend that launches kernels): CPU checks are skipped.
    needs_gpu: bool = False

    def missing_dtype(self, dtype: str) -> str | None:
        """Why a case of ``dtype`` is skipped, or None when it is declared."""
        if dtype in self.dtypes:
            return None
        return (f"dtype {dtype} is not among the declared capabilities ({', '.join(self.dtypes)}); "
                f"declare it with capabilities = Capabilities(dtypes=(..., {dtype!r})) to check it")

    def missing_target(self, target: str) -> str | None:
        if target in self.targets:
            return None
        return (f"target {target} is not among the declared capabilities ({', '.join(self.targets)}); "
                f"declare it with capabilities = Capabilities(targets=(..., {target!r})) to check it")


def declared_capabilities(suite: Any, plugin: Any) -> Capabilities:
    """The suite's ``capabilities``, else the plugin's ``lamina_capabilities``, else the defaults."""
    for source in (getattr(suite, "capabilities", None), getattr(plugin, "lamina_capabilities", None)):
        if isinstance(source, Capabilities):
            return source
        if isinstance(source, dict):
            return Capabilities(**source)
    return Capabilities()

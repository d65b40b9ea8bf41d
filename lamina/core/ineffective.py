"""A setting that does nothing: a ``ConfigWarning`` saying so, or a ``ConfigError`` under ``strict``.

A misspelt variable, a knob no schedule takes or no kernel's schedule received, a plugin name
no plugin has: each is most likely a mistake, and is never ignored without a word. ``strict``
(``LAMINA_STRICT=1``) makes every one an error, for a CI that should refuse them.
"""

from __future__ import annotations

import warnings

from lamina.core.errors import ConfigError, ConfigWarning

STRICT_ADVICE = "\n(strict is set, by LAMINA_STRICT=1 or strict = true; unset it to warn about this instead)"


def does_nothing(message: str, strict: bool, stacklevel: int = 2) -> None:
    """Warn that a setting does nothing, with ``message``; raise it as an error under ``strict``."""
    if strict:
        raise ConfigError(message + STRICT_ADVICE)
    warnings.warn(message, ConfigWarning, stacklevel=stacklevel + 1)

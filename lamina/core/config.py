"""Configuration: ``[tool.lamina]`` in pyproject.toml or a lamina.toml, then ``LAMINA_*`` variables.

The nearest lamina.toml or pyproject.toml with a ``[tool.lamina]`` table, searching
from the working directory upwards, gives the file settings; environment variables
override them, and settings given from Python (``lamina.compile(..., cache_dir=...)``) override
both. Unknown keys are an error, so that a typo never silently does nothing; a ``LAMINA_*``
variable lamina does not know is a warning (the environment holds other programs' settings
too), an error under ``strict``. Both name the closest setting there is.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Mapping

import attrs

from lamina.core.cache_usage import parse_size
from lamina.core.errors import ConfigError
from lamina.core.ineffective import does_nothing
from lamina.core.knobs import ENVIRONMENT_PREFIX, from_environment_name, namespaced
from lamina.core.spelling import did_you_mean

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


def _check_size(value: str | None) -> None:
    if value is not None:
        parse_size(value)


def size_limit(config: Config) -> int | None:
    """``cache_size_limit`` in bytes, or None."""
    return None if config.cache_size_limit is None else parse_size(config.cache_size_limit)


def user_cache_dir() -> str:
    """Where compiled kernels go when no ``cache_dir`` is configured: ``$XDG_CACHE_HOME/lamina``,
    else ``~/.cache/lamina``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "lamina")


@attrs.frozen
class Config:
    #: Plugins to load (entry-point names); None loads every installed plugin.
    plugins: tuple[str, ...] | None = None
    #: Plugins never to load, built-in ones included (``lamina.builtin.schedules.contraction``).
    disable: tuple[str, ...] = ()
    #: A plugin that fails to load is an error instead of a warning.
    strict_plugins: bool = False
    #: A setting that does nothing (an unknown variable, a knob no kernel's schedule received, a
    #: plugin name no plugin has) is an error instead of a warning.
    strict: bool = False
    #: Target name (``sm_90``); None: the visible GPU's architecture, else sm_90.
    target: str | None = None
    #: Backend name; None: ``cuda`` for CUDA tensors, ``reference`` for CPU tensors.
    backend: str | None = None
    #: Schedule to use wherever it applies, by name; None lets the selection policy choose.
    schedule: str | None = None
    #: Name of the selection policy.
    selection: str = "cost_model"
    #: Decisions pinned for schedules and fusion rules, by ``schedule.knob`` (``contraction.block_k``);
    #: tables per schedule are read as dotted names. A name without a schedule (deprecated) pins
    #: every schedule that takes it (``lamina.core.knobs``).
    knobs: Mapping[str, Any] = attrs.field(factory=dict, converter=namespaced)
    #: Composite ATen ops kept whole by the frontend (None: the frontend's default).
    keep: tuple[str, ...] | None = None
    #: Where compiled kernels are cached; None: wherever the environment and the config file say,
    #: else ``user_cache_dir()`` (so that a ``Config`` built in Python still honours ``$LAMINA_CACHE_DIR``).
    cache_dir: str | None = None
    #: A compile that runs past two seconds shows its stage and kernels on a terminal.
    progress: bool = True
    #: Compiled programs are kept under ``cache_dir`` and reused by later processes
    #: (``lamina.core.program_cache``).
    program_cache: bool = True
    #: The most the caches under ``cache_dir`` may hold (``"4 GB"``); past it, the entries used
    #: longest ago are removed after each write (``lamina.core.cache_usage``). None: no limit.
    cache_size_limit: str | None = attrs.field(default=None, validator=lambda _, __, value: _check_size(value))
    #: The file the settings came from, if any.
    source: str | None = None


_LIST_KEYS = {"plugins", "disable", "keep"}
_BOOL_KEYS = {"strict_plugins", "strict", "progress", "program_cache"}
_STR_KEYS = {"target", "backend", "schedule", "selection", "cache_dir", "cache_size_limit"}
_ENV = {
    "LAMINA_PLUGINS": "plugins",
    "LAMINA_DISABLE_PLUGINS": "disable",
    "LAMINA_STRICT_PLUGINS": "strict_plugins",
    "LAMINA_STRICT": "strict",
    "LAMINA_TARGET": "target",
    "LAMINA_BACKEND": "backend",
    "LAMINA_SCHEDULE": "schedule",
    "LAMINA_SELECTION": "selection",
    "LAMINA_KEEP": "keep",
    "LAMINA_CACHE_DIR": "cache_dir",
    "LAMINA_PROGRESS": "progress",
    "LAMINA_PROGRAM_CACHE": "program_cache",
    "LAMINA_CACHE_SIZE_LIMIT": "cache_size_limit",
}


def find_config_file(start: Path | None = None) -> tuple[Path, Mapping[str, Any]] | None:
    """The nearest lamina.toml, or pyproject.toml with a [tool.lamina] table, and its settings."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        own = folder / "lamina.toml"
        if own.is_file():
            return own, _read(own)
        project = folder / "pyproject.toml"
        if project.is_file():
            table = _read(project).get("tool", {}).get("lamina")
            if table is not None:
                return project, table
    return None


def _read(path: Path) -> Mapping[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path} is not valid TOML: {e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path} is not valid TOML: it is not UTF-8 text (byte {e.object[e.start]:#04x} "
                          f"at offset {e.start}); save it as UTF-8") from None


def _from_mapping(values: Mapping[str, Any], where: str) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    known = _LIST_KEYS | _BOOL_KEYS | _STR_KEYS | {"knobs"}
    for key, value in values.items():
        key = key.replace("-", "_")
        if key not in known:
            raise ConfigError(f"{where}: unknown setting {key!r}{did_you_mean(key, known)}; "
                              f"lamina knows {', '.join(sorted(known))}")
        if key in _LIST_KEYS:
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{where}: {key} must be a list of strings")
            value = tuple(value)
        elif key in _BOOL_KEYS and not isinstance(value, bool):
            raise ConfigError(f"{where}: {key} must be true or false")
        elif key in _STR_KEYS and not isinstance(value, str):
            raise ConfigError(f"{where}: {key} must be a string")
        elif key == "knobs":
            value = _knobs_from(value, where)
        settings[key] = value
    return settings


def _knobs_from(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: knobs must be a table of schedule.knob = value")
    try:
        return namespaced(value)
    except ConfigError as error:
        raise ConfigError(f"{where}: {error}") from None


def _parse_env_value(var: str, key: str, raw: str) -> Any:
    if key in _LIST_KEYS:
        return tuple(v.strip() for v in raw.split(",") if v.strip())
    if key in _BOOL_KEYS:
        if raw.lower() in ("1", "true", "yes", "on"):
            return True
        if raw.lower() in ("0", "false", "no", "off", ""):
            return False
        raise ConfigError(f"{var}: expected 1 or 0, got {raw!r}")
    return raw


def _warn_unknown_variables(environ: Mapping[str, str], strict: bool) -> None:
    for var in sorted(environ):
        if var.startswith("LAMINA_") and var not in _ENV and not var.startswith(ENVIRONMENT_PREFIX):
            does_nothing(f"{var} is not a lamina setting and does nothing{did_you_mean(var, _ENV)}; "
                         f"lamina reads {', '.join(sorted(_ENV))} and {ENVIRONMENT_PREFIX}<SCHEDULE>__<KNOB>",
                         strict, stacklevel=3)


def _parse_knob(raw: str) -> Any:
    """A knob's value from the environment: an integer, a number, true or false, else the text."""
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    for convert in (int, float):
        try:
            return convert(raw)
        except ValueError:
            pass
    return raw


def load_config(start: Path | None = None, environ: Mapping[str, str] | None = None, **overrides: Any) -> Config:
    """Defaults, then the config file, then the environment, then ``overrides``."""
    environ = os.environ if environ is None else environ
    settings: dict[str, Any] = {}
    found = find_config_file(start)
    if found:
        path, table = found
        settings.update(_from_mapping(table, str(path)))
        settings["source"] = str(path)
        if "cache_dir" in settings:  # relative to the file's folder, wherever lamina runs from below it
            settings["cache_dir"] = os.path.join(path.parent, os.path.expanduser(settings["cache_dir"]))
    for var, key in _ENV.items():
        if var in environ:
            settings[key] = _parse_env_value(var, key, environ[var])
    strict = overrides.get("strict") if overrides.get("strict") is not None else settings.get("strict", False)
    _warn_unknown_variables(environ, strict)
    knobs = namespaced(settings.get("knobs", {}))
    for var, raw in environ.items():
        if var.startswith(ENVIRONMENT_PREFIX):
            knobs[from_environment_name(var[len(ENVIRONMENT_PREFIX):])] = _parse_knob(raw)
    settings["knobs"] = knobs
    given = {k: v for k, v in overrides.items() if v is not None}
    settings.update(_from_mapping(given, "the settings given from Python") if given else {})
    if settings.get("cache_dir") is not None:
        settings["cache_dir"] = os.path.expanduser(settings["cache_dir"])
    return Config(**settings)

"""The plugin manager: built-in plugins, entry points, allow and block lists.

Built-in plugins are registered exactly like third-party ones, through the hooks of
``hookspecs.py``; they are named here as module paths only, so that the core
imports nothing from the rest of lamina. Third-party plugins come from the
entry-point group ``lamina.plugins`` and are loaded lazily, at the first compile.

A plugin that fails to import, to validate against the hook specs, or to register is
reported by name and skipped; with ``strict_plugins`` (``LAMINA_STRICT_PLUGINS=1``)
that is an error instead. So is a name in the allow or block list that no plugin has, most
likely a misspelt one: a warning naming the closest plugin, an error under ``strict_plugins``
or ``strict``.
"""

from __future__ import annotations

import difflib
import importlib
import warnings
from importlib import metadata
from typing import Any, Callable

import attrs
import pluggy

from lamina.core import hookspecs
from lamina.core.config import Config
from lamina.core.errors import PluginError
from lamina.core.ineffective import does_nothing
from lamina.core.registry import Registry
from lamina.core.spelling import did_you_mean
from lamina.core.version import __version__
from lamina.core.version_spec import satisfies

ENTRY_POINT_GROUP = "lamina.plugins"

#: Built-in plugins: name -> module.
BUILTIN_PLUGINS = {
    "lamina.builtin.ops": "lamina.plugins.ops.plugin",
    "lamina.builtin.fusion": "lamina.plugins.fusion.plugin",
    "lamina.builtin.schedules.generic": "lamina.plugins.schedules.generic.plugin",
    "lamina.builtin.schedules.contraction": "lamina.plugins.schedules.contraction.plugin",
    "lamina.builtin.schedules.matmul_row_reduction": "lamina.plugins.schedules.matmul_row_reduction.plugin",
    "lamina.builtin.schedules.attention": "lamina.plugins.schedules.attention.plugin",
    "lamina.builtin.schedules.pointwise": "lamina.plugins.schedules.pointwise.plugin",
    "lamina.builtin.schedules.row_reduction": "lamina.plugins.schedules.row_reduction.plugin",
    "lamina.builtin.schedules.transpose": "lamina.plugins.schedules.transpose.plugin",
    "lamina.builtin.selection": "lamina.plugins.selection.plugin",
    "lamina.builtin.kernel_passes": "lamina.plugins.kernel_passes.plugin",
    "lamina.builtin.backends.reference": "lamina.backends.reference.plugin",
    "lamina.builtin.backends.cuda": "lamina.backends.cuda.plugin",
}
#: Opt-in plugins shipped with lamina (``lamina/contrib``), loaded only where the configuration asks
#: for what they provide: name -> (module, the selection policy it registers). Elsewhere ``lamina
#: plugins`` lists them as ``off``.
CONTRIB_PLUGINS = {"lamina.contrib.autotune": ("lamina.contrib.autotune.plugin", "autotune")}
#: Built-in plugins renamed in this release: new name -> old name, still honoured in ``disable``.
FORMER_BUILTIN_NAMES = {"lamina.builtin.schedules.matmul_row_reduction": "lamina.builtin.schedules.contraction_rows"}


class PluginWarning(UserWarning):
    """A plugin was skipped because it failed to load or register."""


@attrs.define
class PluginInfo:
    """What ``lamina plugins`` shows about one plugin."""

    name: str
    module: str
    distribution: str | None = None
    version: str | None = None
    builtin: bool = False
    status: str = "loaded"  # loaded | blocked | failed | off (an opt-in plugin not asked for)
    error: str | None = None
    hooks: list[str] = attrs.field(factory=list)
    registered: list[tuple[str, str]] = attrs.field(factory=list)


# What each registration hook's ``register`` callable stores: kind, and how to read a provider.
_REGISTRATION_HOOKS: dict[str, tuple[str, tuple[str, ...]]] = {
    "lamina_register_ops": ("op", ()),
    "lamina_register_fusion_rules": ("fusion_rule", ("apply",)),
    "lamina_register_schedules": ("schedule", ("applies", "schedule", "lower")),
    "lamina_register_kernel_passes": ("kernel_pass", ("apply",)),
    "lamina_register_backends": ("backend", ("available", "emit", "load")),
    "lamina_register_targets": ("target", ("arch",)),
    "lamina_register_selection_policies": ("selection_policy", ("choose",)),
}


class PluginManager:
    """Loads plugins according to a ``Config`` and fills a ``Registry``."""

    def __init__(self, config: Config, entry_points: Callable[[], list] | None = None):
        self.config = config
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.registry = Registry()
        self.plugins: list[PluginInfo] = []
        self._entry_points = entry_points or _installed_entry_points
        self._load()

    # --- loading ---------------------------------------------------------

    def _wanted(self, name: str, builtin: bool) -> bool:
        if name in self.config.disable:
            return False
        former = FORMER_BUILTIN_NAMES.get(name)
        if former is not None and former in self.config.disable:
            warnings.warn(f"the plugin {former} is now {name}; the old name will be refused in the next release",
                          FutureWarning, stacklevel=2)
            return False
        if self.config.plugins is not None and not builtin:
            return name in self.config.plugins
        return True

    def _load(self) -> None:
        for name, module in BUILTIN_PLUGINS.items():
            info = PluginInfo(name=name, module=module, distribution="lamina", version=__version__, builtin=True)
            self._add(info, lambda module=module: importlib.import_module(module))
        for name, (module, _) in CONTRIB_PLUGINS.items():
            info = PluginInfo(name=name, module=module, distribution="lamina", version=__version__, builtin=True)
            if name in contrib_asked_for(self.config):
                self._add(info, lambda module=module: importlib.import_module(module))
            else:
                info.status = "off"
                self.plugins.append(info)
        for ep in sorted(self._entry_points(), key=lambda ep: ep.name):
            dist = getattr(ep, "dist", None)
            info = PluginInfo(
                name=ep.name,
                module=ep.value,
                distribution=dist.metadata["Name"] if dist is not None else None,
                version=dist.version if dist is not None else None,
            )
            self._add(info, ep.load)
        self._check_listed_names()

    def _check_listed_names(self) -> None:
        """Every name in ``plugins`` and ``disable`` is a plugin's: a misspelt one would do nothing."""
        known = [info.name for info in self.plugins]
        lists = (("plugins", "LAMINA_PLUGINS", self.config.plugins or ()),
                 ("disable", "LAMINA_DISABLE_PLUGINS", self.config.disable))
        for setting, variable, names in lists:
            for name in names:
                if name in known or name in FORMER_BUILTIN_NAMES.values():
                    continue
                text = (f"{setting} ({variable}) names the plugin {name!r}, which is not installed, so it does "
                        f"nothing{did_you_mean(name, known)}; the plugins there are: {', '.join(sorted(known))}")
                if self.config.strict_plugins:
                    raise PluginError(text + "\n(LAMINA_STRICT_PLUGINS is set; unset it to warn about this instead)")
                does_nothing(text, self.config.strict, stacklevel=4)

    def _add(self, info: PluginInfo, load: Callable[[], Any]) -> None:
        self.plugins.append(info)
        if not self._wanted(info.name, info.builtin):
            info.status = "blocked"
            return
        try:
            plugin = load()
        except Exception as e:  # a broken plugin must not stop lamina
            self._fail(info, f"failed to import: {type(e).__name__}: {e}")
            return
        try:
            self._check_version(info, plugin)
            self.pm.register(plugin, name=info.name)
            self._check_hook_names(info, plugin)
        except (PluginError, pluggy.PluginValidationError) as e:
            if self.pm.is_registered(plugin):
                self.pm.unregister(plugin)
            self._fail(info, str(e))
            return
        info.hooks = sorted(impl_name for impl_name in _hook_names(self.pm, plugin))
        try:
            self._register_providers(info, plugin)
        except Exception as e:
            self.registry.remove_plugin(info.name)
            self.pm.unregister(plugin)
            info.registered = []
            self._fail(info, f"failed to register: {type(e).__name__}: {e}")

    def _check_version(self, info: PluginInfo, plugin: Any) -> None:
        requires = getattr(plugin, "lamina_requires", None)
        if requires is not None and not satisfies(__version__, requires):
            raise PluginError(f"supports lamina {requires}, but this is lamina {__version__}")

    def _check_hook_names(self, info: PluginInfo, plugin: Any) -> None:
        known = sorted(_REGISTRATION_HOOKS) + ["lamina_observe_ir"]
        for caller in self.pm.get_hookcallers(plugin) or []:
            if caller.spec is None:
                close = difflib.get_close_matches(caller.name, known, n=1)
                hint = f"; did you mean {close[0]}?" if close else ""
                raise PluginError(f"implements {caller.name}, which is not a lamina hook{hint}")

    def _fail(self, info: PluginInfo, message: str) -> None:
        info.status = "failed"
        info.error = message
        text = f"lamina plugin {info.name!r} ({info.module}) was skipped: {message}"
        if self.config.strict_plugins:
            raise PluginError(text + "\n(LAMINA_STRICT_PLUGINS is set; unset it to skip broken plugins instead)")
        warnings.warn(text, PluginWarning, stacklevel=2)

    def _register_providers(self, info: PluginInfo, plugin: Any) -> None:
        for hook_name, (kind, required) in _REGISTRATION_HOOKS.items():
            impl = getattr(plugin, hook_name, None)
            if impl is None or hook_name not in info.hooks:
                continue
            impl(register=self._register_callable(info, kind, required))

    def _register_callable(self, info: PluginInfo, kind: str, required: tuple[str, ...]):
        def register(*args, priority: int | None = None):
            if kind == "op":
                if len(args) != 2 or not isinstance(args[0], str) or not callable(args[1]):
                    raise PluginError("register(op_name, decomposition, priority=0) takes an op name and a callable")
                name, provider = args
                rank = priority or 0
            else:
                if len(args) != 1:
                    raise PluginError(f"register({kind}) takes one provider object")
                provider = args[0]
                missing = [m for m in ("name",) + required if not hasattr(provider, m)]
                if missing:
                    raise PluginError(f"the {kind} {provider!r} lacks {', '.join(missing)}")
                name = provider.name
                rank = priority if priority is not None else getattr(provider, "priority", 0)
            self.registry.add(kind, name, provider, info.name, rank)
            info.registered.append((kind, name))

        return register

    # --- use -------------------------------------------------------------

    def observe(self, level: str, ir: Any, compilation: Any) -> None:
        self.pm.hook.lamina_observe_ir(level=level, ir=ir, compilation=compilation)

    def observed(self) -> bool:
        """Whether a plugin watches the IR levels (``lamina_observe_ir``): if none does, the
        pipeline need not make what only a watcher would read."""
        return bool(self.pm.hook.lamina_observe_ir.get_hookimpls())


def _hook_names(pm: pluggy.PluginManager, plugin: Any) -> list[str]:
    return [caller.name for caller in (pm.get_hookcallers(plugin) or [])]


def _installed_entry_points() -> list:
    return list(metadata.entry_points(group=ENTRY_POINT_GROUP))


_managers: dict[tuple, PluginManager] = {}


def contrib_asked_for(config: Config) -> tuple[str, ...]:
    """The opt-in plugins ``config`` asks for: by the selection policy one provides, or by name in ``plugins``."""
    return tuple(name for name, (_, policy) in CONTRIB_PLUGINS.items()
                 if config.selection == policy or name in (config.plugins or ()))


def get_plugin_manager(config: Config) -> PluginManager:
    """The plugin manager for ``config``'s plugin settings, created (and plugins loaded) on first use."""
    key = (config.plugins, config.disable, config.strict_plugins, config.strict, contrib_asked_for(config))
    manager = _managers.get(key)
    if manager is None:
        manager = _managers[key] = PluginManager(config)
    return manager


def reset_plugin_managers() -> None:
    """Forget loaded plugin managers, so that the next compile loads plugins afresh."""
    _managers.clear()

"""Hook specs evolve by adding only: plugins written for an older lamina keep loading."""

import inspect
import warnings

import pluggy
import pytest
import torch

from lamina.backends.reference.backend import ReferenceBackend
from lamina.core import hookspecs, providers
from lamina.core.config import load_config
from lamina.core.pipeline import Pipeline
from lamina.core.plugins import PluginManager, PluginWarning
from lamina.frontends.torch.capture import capture

from tests.plugins_ecosystem import hook_contract


def current_hooks() -> dict[str, tuple[str, ...]]:
    found = {}
    for name, fn in vars(hookspecs).items():
        if callable(fn) and hasattr(fn, f"{hookspecs.PROJECT}_spec"):
            found[name] = tuple(inspect.signature(fn).parameters)
    return found


def test_no_recorded_hook_was_removed_or_renamed():
    hooks = current_hooks()
    missing = sorted(set(hook_contract.HOOKS) - set(hooks))
    assert not missing, f"hooks removed or renamed: {missing}; hooks may only be added"


@pytest.mark.parametrize("hook", sorted(hook_contract.HOOKS))
def test_no_recorded_hook_argument_was_removed_or_renamed(hook):
    arguments = current_hooks()[hook]
    lost = [a for a in hook_contract.HOOKS[hook] if a not in arguments]
    assert not lost, f"{hook} lost its arguments {lost}; hook arguments may only be added"


@pytest.mark.parametrize("protocol", sorted(hook_contract.PROVIDERS))
def test_no_recorded_provider_method_was_removed_or_renamed(protocol):
    cls = getattr(providers, protocol)
    members = set(getattr(cls, "__annotations__", {})) | {n for n in vars(cls) if not n.startswith("_")}
    for member, arguments in hook_contract.PROVIDERS[protocol].items():
        assert member in members, f"{protocol}.{member} was removed or renamed; providers may only gain members"
        if arguments is not None:
            have = tuple(inspect.signature(getattr(cls, member)).parameters)[1:]
            assert have[:len(arguments)] == arguments, f"{protocol}.{member}{have} no longer starts with {arguments}"


def test_the_check_fails_when_a_hook_is_removed(monkeypatch):
    monkeypatch.delattr(hookspecs, "lamina_register_kernel_passes")
    with pytest.raises(AssertionError, match="lamina_register_kernel_passes"):
        test_no_recorded_hook_was_removed_or_renamed()


def test_the_check_passes_when_a_hook_is_added(monkeypatch):
    @hookspecs.hookspec
    def lamina_register_something_new(register):
        """A hook of a later lamina."""

    monkeypatch.setattr(hookspecs, "lamina_register_something_new", lamina_register_something_new, raising=False)
    test_no_recorded_hook_was_removed_or_renamed()
    assert "lamina_register_something_new" in current_hooks()


class OldOpPlugin:
    """Written for the first lamina: implements one registration hook and nothing else."""

    hookimpl = pluggy.HookimplMarker("lamina")

    @hookimpl
    def lamina_register_ops(self, register):
        register("aten.expm1.default", self.decompose_expm1)

    @staticmethod
    def decompose_expm1(builder, node):
        return builder.binary("sub", builder.unary("exp", builder.value(node.args[0])), 1.0)


class OldObserver:
    """Observes with only the arguments it needs: pluggy passes a subset of a hook's arguments."""

    hookimpl = pluggy.HookimplMarker("lamina")

    def __init__(self):
        self.levels = []

    @hookimpl
    def lamina_observe_ir(self, level):
        self.levels.append(level)


def manager_with(*plugins):
    entry_points = [_EntryPoint(f"old_{k}", plugin) for k, plugin in enumerate(plugins)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", PluginWarning)
        return PluginManager(load_config(environ={}), entry_points=lambda: entry_points)


class _EntryPoint:
    def __init__(self, name, plugin):
        self.name, self.value, self.dist, self._plugin = name, f"{type(plugin).__name__}()", None, plugin

    def load(self):
        return self._plugin


def test_a_plugin_implementing_only_some_hooks_loads_and_works():
    old, observer = OldOpPlugin(), OldObserver()
    manager = manager_with(old, observer)
    infos = {p.name: p for p in manager.plugins}
    assert infos["old_0"].status == "loaded" and infos["old_0"].hooks == ["lamina_register_ops"]
    assert infos["old_1"].status == "loaded" and infos["old_1"].hooks == ["lamina_observe_ir"]

    x = torch.randn(6, 11)
    pipeline = Pipeline(manager.config, manager)
    compilation = pipeline.compile(capture(torch.expm1, (x,)).graph, pipeline.target())
    (result,) = ReferenceBackend().load(compilation, compilation.target)(x)
    torch.testing.assert_close(result, torch.expm1(x))
    assert observer.levels[:5] == ["torch", "tensor", "loop", "tile", "kernel"]

"""Loading plugins: entry points, allow and block lists, broken and misspelled plugins."""

import sys
import warnings

import pytest

from lamina.core.config import load_config
from lamina.core.errors import ConfigWarning, PluginError
from lamina.core.plugins import BUILTIN_PLUGINS, PluginManager, PluginWarning

from tests.core.plugin_distributions import fusion_rule_plugin, install_plugin


def manager(**settings):
    return PluginManager(load_config(environ={}, **settings))


def info(m, name):
    return next(p for p in m.plugins if p.name == name)


def test_builtin_plugins_register_through_the_hooks():
    m = manager()
    for name in BUILTIN_PLUGINS:
        assert info(m, name).status == "loaded", info(m, name).error
    assert m.registry.get("schedule", "generic").plugin == "lamina.builtin.schedules.generic"
    assert m.registry.get("op", "aten.mm.default") is not None
    assert m.registry.get("backend", "reference") is not None


def test_entry_point_plugin_is_found_with_its_distribution(site):
    install_plugin(site, "lamina-rules", "rules", "lamina_test_plugin_rules", fusion_rule_plugin("noop_rule"), "2.3")
    m = manager()
    p = info(m, "rules")
    assert (p.status, p.distribution, p.version) == ("loaded", "lamina-rules", "2.3")
    assert p.registered == [("fusion_rule", "noop_rule")]
    assert m.registry.get("fusion_rule", "noop_rule").plugin == "rules"


def test_blocked_plugin_is_not_imported(site):
    install_plugin(site, "lamina-rules", "rules", "lamina_test_plugin_blocked", fusion_rule_plugin("blocked_rule"))
    m = manager(disable=("rules",))
    assert info(m, "rules").status == "blocked"
    assert "lamina_test_plugin_blocked" not in sys.modules
    assert m.registry.get("fusion_rule", "blocked_rule") is None


def test_allow_list_loads_only_the_named_third_party_plugins(site):
    install_plugin(site, "lamina-a", "a", "lamina_test_plugin_a", fusion_rule_plugin("rule_a"))
    install_plugin(site, "lamina-b", "b", "lamina_test_plugin_b", fusion_rule_plugin("rule_b"))
    m = manager(plugins=("b",))
    assert info(m, "a").status == "blocked"
    assert info(m, "b").status == "loaded"
    assert info(m, "lamina.builtin.ops").status == "loaded"


def test_an_allow_listed_plugin_that_is_not_installed_warns_naming_the_closest(site):
    install_plugin(site, "lamina-rules", "rules", "lamina_test_plugin_allowed", fusion_rule_plugin("allowed_rule"))
    with pytest.warns(ConfigWarning, match=r"plugins \(LAMINA_PLUGINS\) names the plugin 'rulez', which is not "
                                           r"installed, so it does nothing \(did you mean 'rules'\?\)"):
        m = manager(plugins=("rulez",))
    assert info(m, "rules").status == "blocked"


def test_a_misspelt_builtin_in_the_block_list_warns_naming_the_closest():
    with pytest.warns(ConfigWarning, match=r"disable \(LAMINA_DISABLE_PLUGINS\) names the plugin "
                                           r"'lamina.builtin.fusoin'.*did you mean 'lamina.builtin.fusion'"):
        m = manager(disable=("lamina.builtin.fusoin",))
    assert info(m, "lamina.builtin.fusion").status == "loaded"


def test_under_strict_plugins_a_name_no_plugin_has_is_an_error():
    with pytest.raises(PluginError, match=r"(?s)'lamina.builtin.fusoin', which is not installed.*LAMINA_STRICT_PLUGINS is set"):
        manager(disable=("lamina.builtin.fusoin",), strict_plugins=True)


def test_a_former_builtin_name_in_the_block_list_is_no_unknown_name():
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        with pytest.warns(FutureWarning):
            manager(disable=("lamina.builtin.schedules.contraction_rows",))


def test_broken_plugin_is_reported_by_name_and_skipped(site):
    install_plugin(site, "lamina-broken", "broken", "lamina_test_plugin_broken", "raise RuntimeError('no GPU driver here')\n")
    with pytest.warns(PluginWarning, match="'broken'.*RuntimeError: no GPU driver here"):
        m = manager()
    assert info(m, "broken").status == "failed"
    assert info(m, "lamina.builtin.ops").status == "loaded"


def test_strict_mode_makes_a_broken_plugin_an_error(site):
    install_plugin(site, "lamina-broken", "broken", "lamina_test_plugin_strict", "import a_module_that_does_not_exist\n")
    with pytest.raises(PluginError, match="'broken'.*ModuleNotFoundError"):
        manager(strict_plugins=True)


def test_misspelled_hook_is_rejected_with_a_suggestion(site):
    source = """
        from lamina.core.hookspecs import hookimpl

        @hookimpl
        def lamina_register_schedule(register):
            pass
    """
    install_plugin(site, "lamina-typo", "typo", "lamina_test_plugin_typo", source)
    with pytest.warns(PluginWarning, match="lamina_register_schedule, which is not a lamina hook; did you mean lamina_register_schedules"):
        m = manager()
    assert info(m, "typo").status == "failed"


def test_plugin_that_fails_while_registering_leaves_nothing_behind(site):
    source = """
        from lamina.core.hookspecs import hookimpl

        class Rule:
            name = "half_rule"
            priority = 0
            def apply(self, program, target, knobs):
                return None

        @hookimpl
        def lamina_register_fusion_rules(register):
            register(Rule())
            register(object())
    """
    install_plugin(site, "lamina-half", "half", "lamina_test_plugin_half", source)
    with pytest.warns(PluginWarning, match="'half'.*lacks name, apply"):
        m = manager()
    assert m.registry.get("fusion_rule", "half_rule") is None


def test_unsupported_lamina_version_is_one_clear_line(site):
    source = """
        lamina_requires = ">=9.0"
    """
    install_plugin(site, "lamina-future", "future", "lamina_test_plugin_future", source)
    with pytest.warns(PluginWarning, match="'future'.*supports lamina >=9.0, but this is lamina 0.1.0"):
        m = manager()
    assert info(m, "future").status == "failed"


def test_selection_order_does_not_depend_on_load_order(site):
    install_plugin(site, "lamina-z", "z_first", "lamina_test_plugin_z", fusion_rule_plugin("same_rule"))
    install_plugin(site, "lamina-y", "a_second", "lamina_test_plugin_y", fusion_rule_plugin("same_rule"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = manager()
    winners = [e.plugin for e in m.registry.candidates("fusion_rule", "same_rule")]
    assert winners == ["a_second", "z_first"]

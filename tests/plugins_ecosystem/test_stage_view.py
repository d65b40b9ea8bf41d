"""``lamina plugins`` says which provider each stage will use under the current configuration."""

import json

import pytest

from lamina.cli.main import main
from lamina.cli.plugins_command import format_stage_view, stage_view
from lamina.core.config import load_config
from lamina.core.hookspecs import hookimpl
from lamina.core.plugins import PluginManager
from lamina.plugins.ops.plugin import DECOMPOSITIONS


class FasterRelu:
    """Overrides one built-in op with a higher priority."""

    @hookimpl
    def lamina_register_ops(self, register):
        register("aten.relu.default", DECOMPOSITIONS["aten.relu.default"], priority=5)


class EntryPoint:
    def __init__(self, name, plugin):
        self.name, self.value, self.dist, self._plugin = name, type(plugin).__name__, None, plugin

    def load(self):
        return self._plugin


def view(*plugins, **settings):
    eps = [EntryPoint(name, plugin) for name, plugin in plugins]
    return stage_view(PluginManager(load_config(environ={}, **settings), entry_points=lambda: eps))


def test_the_builtins_alone():
    v = view()
    assert v["ops"]["count"] == len(DECOMPOSITIONS)
    assert v["ops"]["by_plugin"] == {"lamina.builtin.ops": len(DECOMPOSITIONS)}
    assert v["ops"]["overridden"] == []
    assert [s["name"] for s in v["schedules"]["providers"]] == [
        "transpose", "pointwise", "row_reduction", "attention", "attention_decode", "attention_float32", "unrolled_reduction", "contraction", "matmul_row_reduction", "generic"]
    assert v["schedules"]["configured"] is None
    assert v["selection_policy"] == {"name": "cost_model", "plugin": "lamina.builtin.selection", "registered": True}
    rules = [r["priority"] for r in v["fusion_rules"]]
    assert rules == sorted(rules, reverse=True)
    backends = {b["name"]: b for b in v["backends"]["providers"]}
    assert backends["reference"]["available"] is True
    assert v["target"]["registered"] is True


def test_an_overridden_op_names_the_winner_and_the_loser():
    v = view(("faster_relu", FasterRelu()))
    (relu,) = v["ops"]["overridden"]
    assert relu == {"name": "aten.relu.default", "plugin": "faster_relu", "priority": 5,
                    "overrides": ["lamina.builtin.ops"]}
    assert v["ops"]["by_plugin"]["faster_relu"] == 1
    assert "    aten.relu.default: faster_relu wins over lamina.builtin.ops" in format_stage_view(v)


def test_the_configuration_is_shown():
    v = view(schedule="generic", target="sm_80", disable=("lamina.builtin.schedules.contraction",))
    assert v["schedules"]["configured"] == "generic" and v["schedules"]["configured_registered"] is True
    assert [s["name"] for s in v["schedules"]["providers"]] == ["transpose", "pointwise", "row_reduction",
                                                                "attention", "attention_decode", "attention_float32", "matmul_row_reduction",
                                                                "generic"]
    assert v["target"]["name"] == "sm_80" and v["target"]["why"] == "configured"
    text = "\n".join(format_stage_view(v))
    assert "configured: generic, wherever it applies" in text
    assert "disabled plugins: lamina.builtin.schedules.contraction" in text
    assert "target: sm_80 (configured)" in text


def test_names_that_are_not_registered_are_flagged():
    text = "\n".join(format_stage_view(view(schedule="fastest", selection="fastest_guess", target="sm_75")))
    assert "configured: fastest, wherever it applies  (NOT REGISTERED: compiles will fail)" in text
    assert "selection policy: fastest_guess  (NOT REGISTERED: compiles will fail)" in text
    assert "target: sm_75 (configured)  (NOT REGISTERED; known: sm_80, sm_90)" in text


@pytest.fixture
def no_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for var in ("LAMINA_SCHEDULE", "LAMINA_PLUGINS", "LAMINA_DISABLE_PLUGINS", "LAMINA_SELECTION", "LAMINA_TARGET"):
        monkeypatch.delenv(var, raising=False)


def test_the_command_prints_plugins_then_stages(no_config, capsys, monkeypatch):
    monkeypatch.setenv("LAMINA_SCHEDULE", "generic")
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert out.index("lamina.builtin.ops") < out.index("Stages under the current configuration")
    assert "configured: generic, wherever it applies" in out


def test_the_command_prints_the_stages_as_json(no_config, capsys):
    assert main(["plugins", "--stages", "--json"]) == 0
    v = json.loads(capsys.readouterr().out)
    assert set(v) == {"config", "ops", "fusion_rules", "schedules", "selection_policy", "kernel_passes", "backends", "target"}
    assert [s["name"] for s in v["schedules"]["providers"]][:10] == [
        "transpose", "pointwise", "row_reduction", "attention", "attention_decode", "attention_float32", "unrolled_reduction", "contraction", "matmul_row_reduction", "generic"]


def test_the_plugin_list_stays_a_json_list(no_config, capsys):
    assert main(["plugins", "--json"]) == 0
    assert isinstance(json.loads(capsys.readouterr().out), list)

"""Every setting of the README's configuration table takes effect from lamina.toml, from
``[tool.lamina]`` in pyproject.toml and from its environment variable alike.

The rows are read from the README, so a new setting without a check here fails. Each check
compiles (or loads plugins) under the configuration and looks for what the setting changes,
not only for the parsed value.
"""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path
from typing import Any, Callable

import attrs
import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.core import cache_usage, progress
from lamina.core.config import Config, load_config, size_limit
from lamina.core.errors import ConfigError, DeviceError, PluginError

from tests.core.plugin_distributions import fusion_rule_plugin, install_plugin

README = Path(__file__).parents[2] / "README.md"
KNOB_VARIABLE = "LAMINA_KNOB_<SCHEDULE>__<KNOB>"


def readme_rows() -> dict[str, str]:
    """Each setting of the README's configuration table, with its variable."""
    text = README.read_text()
    table = text[text.index("| setting | variable |"):].split("\n\n")[0]
    return dict(re.findall(r"^\| `(\w+)` \| `([A-Z_<>]+)` \|", table, re.MULTILINE))


torch.manual_seed(0)
X, W = torch.randn(9, 40), torch.randn(40, 11)


def matmul(x, w):
    return x @ w


def silu(x):
    return F.silu(x) + 1.0


def softmax(x):
    return torch.softmax(x, 1) * 2.0


def compiled_matmul(config: Config):
    compiled = lamina.Compiler(config=config).compile(matmul, (X, W))
    torch.testing.assert_close(compiled(X, W), X @ W, rtol=1e-4, atol=1e-4)
    return compiled


def schedules(compiled) -> list[str]:
    return [tile.schedule for tile in compiled.compilation.tiles]


SIMPLEST_POLICY_PLUGIN = """
    from lamina.core.hookspecs import hookimpl

    class Simplest:
        '''Chooses the generic schedule wherever it applies.'''
        name = "simplest"
        def choose(self, kernel, candidates, target):
            return next((s for s in candidates if s.name == "generic"), candidates[-1])

    @hookimpl
    def lamina_register_selection_policies(register):
        register(Simplest())
"""


def install_rules(site: Path) -> None:
    for name in ("alpha", "beta"):
        install_plugin(site, f"lamina-{name}", name, f"lamina_test_plugin_{name}", fusion_rule_plugin(f"{name}_rule"))


def check_plugins(config: Config, site: Path) -> None:
    rules = lamina.Compiler(config=config).plugins.registry.names("fusion_rule")
    assert "alpha_rule" in rules and "beta_rule" not in rules
    compiled_matmul(config)


def check_disable(config: Config, site: Path) -> None:
    assert schedules(compiled_matmul(config)) == ["generic"]


def check_strict_plugins(config: Config, site: Path) -> None:
    with pytest.raises(PluginError, match="'broken'"):
        compiled_matmul(config)


def check_strict(config: Config, site: Path) -> None:
    with pytest.raises(ConfigError, match=r"knob contraction\.block_k = 32 was pinned.*the pin has no effect"):
        lamina.Compiler(config=attrs.evolve(config, knobs={"contraction.block_k": 32})).compile(softmax, (X,))


def check_schedule(config: Config, site: Path) -> None:
    assert schedules(compiled_matmul(config)) == ["generic"]


def check_selection(config: Config, site: Path) -> None:
    assert schedules(compiled_matmul(config)) == ["generic"]


def check_knobs(config: Config, site: Path) -> None:
    (tile,) = compiled_matmul(config).compilation.tiles
    assert dict(tile.knobs)["chosen"].endswith("pinned: block_k=8")


def check_target(config: Config, site: Path) -> None:
    assert compiled_matmul(config).compilation.target.arch == "sm_80"


def check_backend(config: Config, site: Path) -> None:
    compiled = lamina.Compiler(config=config).compile(softmax, (X,))
    with pytest.MonkeyPatch.context() as patch, pytest.raises(DeviceError, match="the cuda backend cannot run here"):
        patch.setattr(torch.cuda, "is_available", lambda: False)  # CPU inputs run on the reference backend otherwise
        compiled(X)


def check_keep(config: Config, site: Path) -> None:
    compiled = lamina.Compiler(config=config).compile(silu, (X,))
    assert "aten.silu" not in compiled.ir("torch") and "aten.sigmoid" in compiled.ir("torch")
    torch.testing.assert_close(compiled(X), silu(X))


def check_cache_dir(config: Config, site: Path) -> None:
    from lamina.backends.cuda.driver import LaunchableKernel

    compiled = lamina.Compiler(config=config).compile(softmax, (X,))
    with pytest.MonkeyPatch.context() as patch:  # NVRTC needs no GPU; preparing launches does
        patch.setattr(torch.cuda, "is_available", lambda: False)
        patch.setattr(LaunchableKernel, "prepare", lambda self, device=None: None)
        compiled.compiler.backend("cuda").load(compiled.compilation)
    assert len(list((site / "kernels" / "cubins").glob("*.cubin"))) == compiled.kernel_count


class Terminal(io.StringIO):
    """A stream that says it is a terminal, as the progress line asks."""

    def isatty(self) -> bool:
        return True


def check_progress(config: Config, site: Path) -> None:
    shown, hidden = Terminal(), Terminal()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(progress, "SHOW_AFTER_S", 0.0)
        patch.setattr(sys, "stderr", shown)
        compiled_matmul(attrs.evolve(config, progress=True))
        patch.setattr(sys, "stderr", hidden)
        compiled_matmul(config)
    assert "lamina: compiling for" in shown.getvalue() and hidden.getvalue() == ""


def check_program_cache(config: Config, site: Path) -> None:
    stored = site / "cache"
    compiled_matmul(attrs.evolve(config, program_cache=True, cache_dir=str(stored)))
    cache_usage.finish_writes()  # the program is stored from a thread of its own
    assert len(list((stored / "programs").glob("*.pickle"))) == 1
    reused = compiled_matmul(attrs.evolve(config, program_cache=True, cache_dir=str(stored)))
    assert "loading from the program cache" in reused.compilation.timings.stages
    again = compiled_matmul(attrs.evolve(config, cache_dir=str(stored)))
    assert "loading from the program cache" not in again.compilation.timings.stages


def check_cache_size_limit(config: Config, site: Path) -> None:
    """Two programs under a limit that holds one: the one compiled first is removed."""
    stored = site / "limited"
    compiled_matmul(attrs.evolve(config, program_cache=True, cache_dir=str(stored)))
    assert cache_usage.usage(stored)["programs"][0] == 1
    compiled_matmul(attrs.evolve(config, program_cache=True, cache_dir=str(stored), target="sm_80"))
    count, size = cache_usage.usage(stored)["programs"]
    assert count == 1 and size <= size_limit(config)


@attrs.frozen
class Setting:
    """A value in TOML and in the variable ({site}: the test's folder), what to install first, what to check."""

    toml: str
    variable: str
    check: Callable[[Config, Path], None]
    prepare: Callable[[Path], Any] = lambda site: None


SETTINGS = {
    "plugins": Setting('["alpha"]', "alpha", check_plugins, install_rules),
    "disable": Setting('["lamina.builtin.schedules.contraction"]', "lamina.builtin.schedules.contraction",
                       check_disable),
    "strict_plugins": Setting("true", "1", check_strict_plugins, lambda site: install_plugin(
        site, "lamina-broken", "broken", "lamina_test_plugin_broken", "raise ImportError('missing dependency')\n")),
    "strict": Setting("true", "1", check_strict),
    "schedule": Setting('"generic"', "generic", check_schedule),
    "selection": Setting('"simplest"', "simplest", check_selection, lambda site: install_plugin(
        site, "lamina-simplest", "simplest", "lamina_test_plugin_simplest", SIMPLEST_POLICY_PLUGIN)),
    "knobs": Setting("{ contraction = { block_k = 8 } }", "8", check_knobs),
    "target": Setting('"sm_80"', "sm_80", check_target),
    "backend": Setting('"cuda"', "cuda", check_backend),
    "keep": Setting('["aten.softmax.int"]', "aten.softmax.int", check_keep),
    "cache_dir": Setting('"{site}/kernels"', "{site}/kernels", check_cache_dir),
    "progress": Setting("false", "0", check_progress),
    "program_cache": Setting("false", "0", check_program_cache),
    "cache_size_limit": Setting('"20 kB"', "20 kB", check_cache_size_limit),  # a program here: 16 kB
}


def test_every_row_of_the_readme_has_a_check():
    assert set(readme_rows()) == set(SETTINGS)


@pytest.mark.parametrize("source", ["lamina.toml", "pyproject.toml", "environment"])
@pytest.mark.parametrize("name", sorted(readme_rows()))
def test_the_setting_takes_effect(site, name, source):
    setting, variable = SETTINGS[name], readme_rows()[name]
    setting.prepare(site)
    toml = setting.toml.replace("{site}", site.as_posix())
    environ = {}
    if source == "lamina.toml":
        (site / "lamina.toml").write_text(f"{name} = {toml}\n")
    elif source == "pyproject.toml":
        (site / "pyproject.toml").write_text(f'[project]\nname = "x"\n\n[tool.lamina]\n{name} = {toml}\n')
    else:
        variable = "LAMINA_KNOB_CONTRACTION__BLOCK_K" if variable == KNOB_VARIABLE else variable
        environ = {variable: setting.variable.replace("{site}", str(site))}
    config = load_config(start=site, environ=environ)
    if name != "program_cache":  # the checks watch compiles run, not loaded from an earlier test's
        config = attrs.evolve(config, program_cache=False)
    setting.check(config, site)


def test_without_the_settings_the_checks_see_lamina_s_defaults(site):
    config = load_config(start=site, environ={})
    assert schedules(compiled_matmul(config)) == ["contraction"]
    assert compiled_matmul(config).compilation.target.arch == "sm_90"
    assert "aten.silu.default" in lamina.Compiler(config=config).compile(silu, (X,)).ir("torch")
    torch.testing.assert_close(lamina.Compiler(config=config).compile(softmax, (X,))(X), softmax(X))

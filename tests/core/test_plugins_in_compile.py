"""Plugins from installed distributions take part in real compiles."""


import pytest
import torch

import lamina
from lamina.core.errors import UnsupportedOpError
from lamina.core.plugins import PluginWarning, reset_plugin_managers

from tests.core.plugin_distributions import install_plugin

SIGN_PLUGIN = """
    from lamina.core.hookspecs import hookimpl
    from lamina.core.ir import expr as ex
    from lamina.core.ir.tensor_ir import Arg

    def decompose_sign(builder, node):
        x = builder.value(node.args[0])
        a = Arg(0, builder.dtype(x))
        negative_or_zero = ex.op("where", ex.op("lt", a, 0.0), -1.0, 0.0)
        return builder.elementwise(ex.op("where", ex.op("gt", a, 0.0), 1.0, negative_or_zero), [x])

    @hookimpl
    def lamina_register_ops(register):
        register("aten.sign.default", decompose_sign)
"""


def program(x):
    return torch.sign(x) * x + 1.0


def test_an_op_plugin_makes_an_unsupported_program_compile(site):
    x = torch.randn(7, 19)
    with pytest.raises(UnsupportedOpError, match="aten.sign.default"):
        lamina.compile(program, (x,))
    reset_plugin_managers()
    install_plugin(site, "lamina-sign", "sign", "lamina_test_plugin_sign", SIGN_PLUGIN)
    compiled = lamina.compile(program, (x,))
    torch.testing.assert_close(compiled(x), program(x))


def test_a_broken_plugin_does_not_stop_the_compile(site):
    install_plugin(site, "lamina-broken", "broken", "lamina_test_plugin_broken_compile", "raise ImportError('missing dependency')\n")
    x = torch.randn(5, 3)
    with pytest.warns(PluginWarning, match="'broken'"):
        compiled = lamina.compile(lambda x: x * 2.0, (x,))
    torch.testing.assert_close(compiled(x), x * 2.0)


def test_a_blocked_builtin_schedule_is_not_used(site, monkeypatch):
    monkeypatch.setenv("LAMINA_DISABLE_PLUGINS", "lamina.builtin.schedules.contraction")
    x, w = torch.randn(8, 8), torch.randn(8, 8)
    compiled = lamina.compile(lambda x, w: x @ w, (x, w))
    assert [t.schedule for t in compiled.compilation.tiles] == ["generic"]

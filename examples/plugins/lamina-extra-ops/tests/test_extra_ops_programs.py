"""Programs using the plugin's ops compile once it is installed, and match eager PyTorch on the simulator."""

import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.core.config import load_config
from lamina.core.errors import UnsupportedOpError
from lamina.core.plugins import PluginManager
from lamina.frontends.torch.capture import DEFAULT_KEEP

import lamina_extra_ops

KEEP = DEFAULT_KEEP + lamina_extra_ops.KEEP


def test_the_plugin_is_installed_under_its_entry_point():
    manager = PluginManager(load_config(environ={}))
    info = next(p for p in manager.plugins if p.name == "extra_ops")
    assert (info.status, info.distribution) == ("loaded", "lamina-extra-ops"), info.error
    assert sorted(name for kind, name in info.registered) == sorted(lamina_extra_ops.DECOMPOSITIONS)


def test_without_the_plugin_the_kept_ops_are_unsupported():
    x = torch.randn(5, 7)
    with pytest.raises(UnsupportedOpError, match="aten.mish.default"):
        lamina.compile(F.mish, (x,), keep=KEEP, disable=("extra_ops",))


def test_mish_compiles_as_pytorch_decomposes_it():
    x = torch.randn(13, 37) * 6
    compiled = lamina.compile(lambda x: F.mish(x) + F.softplus(x), (x,))
    torch.testing.assert_close(compiled(x), F.mish(x) + F.softplus(x))


PROGRAMS = {
    "logaddexp": (lambda a, b: torch.logaddexp(a, b), [(9, 33), (9, 33)]),
    "logaddexp_broadcast": (lambda a, b: torch.logaddexp(a, b), [(9, 1, 17), (5, 1)]),
    "log1p": (lambda x: torch.log1p(x.abs()), [(31, 7)]),
    "softplus": (lambda x: F.softplus(x), [(65,)]),
    "softplus_beta": (lambda x: F.softplus(x, beta=2.0, threshold=5.0), [(3, 41)]),
    "mish": (lambda x: F.mish(x), [(4, 5, 6)]),
    "hardswish": (lambda x: F.hardswish(x), [(129,)]),
}


@pytest.mark.parametrize("name", PROGRAMS)
def test_each_kept_op_is_one_elementwise_and_matches_pytorch(name):
    program, shapes = PROGRAMS[name]
    inputs = [torch.randn(*shape) * 8 for shape in shapes]
    compiled = lamina.compile(program, inputs, keep=KEEP)
    assert compiled.kernel_count == 1
    torch.testing.assert_close(compiled(*inputs), program(*inputs))


def test_logaddexp_is_stable_at_the_edges():
    a = torch.tensor([1e4, -1e4, float("inf"), float("-inf"), float("-inf"), 0.0, 1e-30, 88.0, -200.0])
    b = torch.tensor([1e4, -1e4, float("inf"), float("-inf"), 3.0, -1e-7, -1e-30, 89.0, -200.5])
    compiled = lamina.compile(torch.logaddexp, (a, b), keep=KEEP)
    torch.testing.assert_close(compiled(a, b), torch.logaddexp(a, b))


def test_log1p_keeps_precision_for_tiny_inputs():
    tiny = torch.tensor([1e-10, -1e-9, 3e-8, 1e-3]) * (1 + torch.rand(4))
    x = torch.cat([tiny, torch.tensor([0.0, -1.0, float("inf")])])
    compiled = lamina.compile(torch.log1p, (x,))
    torch.testing.assert_close(compiled(x), torch.log1p(x), rtol=1e-6, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_other_float_types_compute_like_pytorch(dtype):
    a, b = torch.randn(6, 10, dtype=dtype) * 4, torch.randn(6, 10, dtype=dtype) * 4

    def program(a, b):
        return torch.logaddexp(F.mish(a), F.hardswish(b))

    compiled = lamina.compile(program, (a, b), keep=KEEP)
    got = compiled(a, b)
    assert got.dtype == dtype
    torch.testing.assert_close(got, program(a, b))

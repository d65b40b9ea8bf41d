"""A kernel the same as an earlier one but for its buffers' names is lowered once: the later
ones take its Kernel IR under their own names, which is, names aside, what lowering them anew
gives, and runs as eager does."""

import torch

import lamina
from lamina.api import Compiler
from lamina.backends.cuda.kernel_sources import anonymous_kernel
from lamina.backends.cuda.targets import SM90 as SM_90
from lamina.core.stages.lower_to_kernels import KernelLowering
from tests.plugins.fusion.test_repeated_layers import H, S, layers


class _Counting:
    """A schedule whose lowerings are counted."""

    def __init__(self, schedule, calls):
        self.schedule, self.calls, self.name = schedule, calls, schedule.name

    def lower(self, tile, target):
        self.calls.append(tile.kernel.name)
        return self.schedule.lower(tile, target)


def _compiled(count):
    torch.manual_seed(count)
    x = torch.randn(S, H, dtype=torch.bfloat16)
    norms = [torch.randn(H, dtype=torch.bfloat16) for _ in range(count)]
    weights = [torch.randn(H, H, dtype=torch.bfloat16) * 0.1 for _ in range(count)]
    return lamina.compile(layers, (x, norms, weights), target="sm_90"), (x, norms, weights)


def test_each_distinct_kernel_is_lowered_once_and_the_others_are_as_if_lowered_anew():
    compiled, _ = _compiled(4)
    registry = Compiler().plugins.registry
    passes = [e.provider for e in registry.ranked("kernel_pass")]
    schedules = {e.provider.name: e.provider for e in registry.ranked("schedule")}
    calls = []
    lowering = KernelLowering(passes, SM_90)
    tiles = compiled.compilation.tiles
    kernels = [lowering.lower(_Counting(schedules[t.schedule], calls), t) for t in tiles]
    assert len(calls) <= len(tiles) // 2, "the first layer differs from the rest; the third and fourth are the second's"
    for tile, kernel in zip(tiles, kernels):
        assert kernel.name == tile.kernel.name
        anew = KernelLowering(passes, SM_90).lower(schedules[tile.schedule], tile)
        assert anonymous_kernel(kernel) == anonymous_kernel(anew)
        assert kernel == anew, "the arrays named after a buffer are named after this kernel's"
        assert {p.name for p in kernel.params} == {b.name for b in tile.kernel.inputs + tile.kernel.outputs}
    by_name = {k.name: k for k in kernels}
    assert len(lowering.repeats) == len(tiles) - len(calls)
    for name, earlier in lowering.repeats.items():
        assert anonymous_kernel(by_name[name]) == anonymous_kernel(by_name[earlier])
    assert compiled.compilation.kernels.repeats == tuple(lowering.repeats.items())


def test_layers_lowered_once_run_as_eager_does():
    _, args = _compiled(3)
    simulated = lamina.compile(layers, args)
    torch.testing.assert_close(simulated(*args), layers(*args), rtol=2e-2, atol=2e-2)


def _attention_like(x, weights):
    for w in weights:
        x = torch.softmax((x @ w) * 0.1, dim=-1) @ w.T + x
    return x


def test_kernels_whose_accumulators_are_named_after_their_layer_are_lowered_once():
    """Fusion names a product it inlines into a row reduction after the product's op (``mm_2``), and
    so after its layer: the accumulators are compared by position, as the buffers are."""
    torch.manual_seed(0)
    args = (torch.randn(100, 96), [torch.randn(96, 96) for _ in range(4)])
    compiled = lamina.compile(_attention_like, args, target="sm_90")
    repeats = dict(compiled.compilation.kernels.repeats)
    assert {name: repeats.get(name) for name in ("softmax_2", "softmax_3")} == {"softmax_2": "softmax_1",
                                                                                "softmax_3": "softmax_1"}
    simulated = lamina.compile(_attention_like, args)
    torch.testing.assert_close(simulated(*args), _attention_like(*args), rtol=1e-4, atol=1e-4)


def _two_loops_kernel():
    """A loop over a register array's sums and a guarded store of ``x`` read deep in an expression."""
    from lamina.core.ir import dtypes, expr as ex, kernel_ir as kir
    f32, i = dtypes.float32, ex.Var("i")
    x_deep = ex.op("add", ex.op("mul", kir.Load("x", (i,), f32), ex.const(2.0, f32)), kir.Load("acc", (ex.const(0),), f32))
    sums = kir.For("j", ex.const(0), ex.const(4), 1, (
        kir.Store("acc", (ex.const(0),), ex.op("add", kir.Load("acc", (ex.const(0),), f32), ex.const(1.0, f32))),))
    guarded = kir.For("i", ex.const(0), ex.const(8), 1, (kir.If(ex.op("lt", i, ex.const(6)), (kir.Store("y", (i,), x_deep),)),))
    return kir.Kernel("k", params=(kir.Param("x", f32, 8), kir.Param("y", f32, 8, writable=True)),
                      arrays=(kir.Array("acc", f32, (1,), "register"),), body=(sums, guarded),
                      launch=kir.Launch((1, 1, 1), (32, 1, 1)))


def test_renaming_rebuilds_only_what_names_a_renamed_array_and_each_renaming_is_its_own():
    from lamina.core.ir import kernel_ir as kir
    kernel = _two_loops_kernel()
    first = kir.rename_arrays(kernel, {"x": "x1", "y": "y1", "acc": "acc"})
    second = kir.rename_arrays(kernel, {"x": "x2", "y": "y1"})
    third = kir.rename_arrays(kernel, {"acc": "sums"})
    assert first.body[0] is kernel.body[0], "the register sums keep their statement"
    assert [p.name for p in first.params] == ["x1", "y1"] and [p.name for p in second.params] == ["x2", "y1"]
    for renamed, old, new in ((first, ("x", "y"), ("x1", "y1")), (second, ("x", "y"), ("x2", "y1")),
                              (third, ("acc",), ("sums",))):
        text = kir.format_kernel(renamed)
        assert text == _renamed_text(kir.format_kernel(kernel), dict(zip(old, new)))
    assert third.body[1].body[0].then[0].value.args[1].array == "sums"


def _renamed_text(text, mapping):
    import re
    return re.sub(r"\b(" + "|".join(mapping) + r")\b", lambda m: mapping[m.group(1)], text)

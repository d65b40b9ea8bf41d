"""The reference backend runs a compiled program's kernels through the simulator, in order."""

from __future__ import annotations

import types

import pluggy
import pytest
import torch

from lamina.backends.cuda.targets import SM90 as TARGET
from lamina.backends.reference import plugin
from lamina.backends.reference.backend import ReferenceBackend
from lamina.core import hookspecs
from lamina.core.errors import SimulationError
from lamina.core.ir import dtypes, kernel_ir as kir, loop_ir
from lamina.core.ir.expr import Var, op
from lamina.core.ir.torch_ir import TensorType

F32 = dtypes.float32
ROWS, COLS = 5, 37
N = ROWS * COLS


def pointwise(name: str, inputs: list[str], output: str, value, limit: int = N) -> kir.Kernel:
    i = Var("i")
    loads = [kir.Load(b, (i,), F32) for b in inputs]
    return kir.Kernel(
        name=name,
        params=[*(kir.Param(b, F32, N) for b in inputs), kir.Param(output, F32, N, writable=True)],
        arrays=[],
        body=[kir.Declare("i", dtypes.index, kir.block_idx() * 64 + kir.thread_idx()),
              kir.If(op("lt", i, limit), [kir.Store(output, (i,), value(*loads))])],
        launch=kir.Launch((-(-N // 64), 1, 1), (64, 1, 1)),
    )


def compilation(limit: int = N):
    """``y = x * w + x`` as two kernels through a temporary ``t``."""
    def buffer(name: str) -> loop_ir.Buffer:
        return loop_ir.Buffer(name, TensorType((ROWS, COLS), F32))

    loop = loop_ir.Program(inputs=[buffer("x"), buffer("w")], outputs=[buffer("y")],
                           temporaries=[buffer("t")], kernels=[])
    kernels = kir.Program([
        pointwise("scale", ["x", "w"], "t", lambda x, w: op("mul", x, w)),
        pointwise("add", ["t", "x"], "y", lambda t, x: op("add", t, x), limit),
    ])
    return types.SimpleNamespace(loop=loop, kernels=kernels)


def test_load_runs_every_kernel_in_order_on_the_cpu():
    backend = ReferenceBackend()
    assert backend.name == "reference"
    assert backend.available() is None
    assert backend.emit(compilation().kernels, TARGET) is None
    runner = backend.load(compilation(), TARGET)
    x, w = torch.randn(ROWS, COLS), torch.randn(ROWS, COLS)
    (y,) = runner(x, w)
    assert y.shape == (ROWS, COLS) and y.device.type == "cpu"
    assert torch.equal(y, x * w + x)


def test_a_fault_stops_the_run():
    runner = ReferenceBackend().load(compilation(limit=N + 1), TARGET)
    with pytest.raises(SimulationError, match="kernel add: load from t at offset 185, outside \\[0, 185\\)"):
        runner(torch.randn(ROWS, COLS), torch.randn(ROWS, COLS))


def test_the_plugin_registers_the_backend_through_the_hook():
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    manager.register(plugin)
    registered = []
    manager.hook.lamina_register_backends(register=registered.append)
    assert [type(b) for b in registered] == [ReferenceBackend]

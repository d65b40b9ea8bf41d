"""Contraction kernels written directly in Loop IR, with the PyTorch computation each must match."""

from __future__ import annotations

import math
from typing import Callable

import attrs
import torch

from lamina.backends.cuda.targets import SM90 as SM_90
from lamina.core.ir import dtypes, expr as ex, kernel_ir, loop_ir
from lamina.core.ir.torch_ir import TensorType
from lamina.runtime.program_runner import torch_dtype

F32 = dtypes.float32
FMA = {"products": "fma"}
"""Pins the products to FMAs on the CUDA cores, where a test is about those kernels' rules:
on Hopper the cost model runs K-major float32 products on wgmma."""


def v(name: str) -> ex.Var:
    return ex.Var(name)


def load(buffer: str, *index, dtype=F32) -> loop_ir.Load:
    return loop_ir.Load(buffer, tuple(v(i) if isinstance(i, str) else i for i in index), dtype)


ACC = ex.Var("acc0", F32)


@attrs.frozen
class Case:
    """A Loop IR kernel and the eager PyTorch function of its inputs (in kernel order)."""

    id: str
    kernel: loop_ir.Kernel
    reference: Callable[..., torch.Tensor]

    def inputs(self) -> dict[str, torch.Tensor]:
        return {b.name: torch.randn(b.type.shape, dtype=torch_dtype(b.type.dtype)) for b in self.kernel.inputs}


def contraction(
    name: str,
    inputs: dict[str, tuple[int, ...]],
    parallel: list[tuple[str, int]],
    reduce: tuple[str, int],
    value: ex.Expr,
    out: tuple[str, tuple[int, ...]],
    store: ex.Expr = ACC,
    out_index: tuple[str, ...] | None = None,
    dtype=F32,
    input_dtype=None,
) -> loop_ir.Kernel:
    """``out[out_index] = store`` with ``acc0 = sum over reduce of value``; ``out_index``
    defaults to the parallel variables in order."""
    out_name, out_shape = out
    body: list[loop_ir.Stmt] = [
        loop_ir.Init("acc0", ex.Const(0.0, dtype)),
        loop_ir.Loop(reduce[0], reduce[1], "reduce", [loop_ir.Accumulate("acc0", "sum", value)]),
        loop_ir.Store(out_name, tuple(v(p) for p in out_index or [p for p, _ in parallel]), store),
    ]
    for var, extent in reversed(parallel):
        body = [loop_ir.Loop(var, extent, "parallel", body)]
    kernel = loop_ir.Kernel(
        name,
        [loop_ir.Buffer(n, TensorType(s, input_dtype or dtype)) for n, s in inputs.items()],
        [loop_ir.Buffer(out_name, TensorType(out_shape, dtype))],
        body,
    )
    loop_ir.verify_kernel(kernel)
    return kernel


def running_example(m: int = 16, k: int = 64, n: int = 16) -> Case:
    """``torch.relu(torch.matmul(x + bias, w))`` after fusion."""
    kernel = contraction(
        "relu",
        {"x": (m, k), "bias": (k,), "w": (k, n)},
        [("i0", m), ("i1", n)],
        ("r0", k),
        ex.op("mul", ex.op("add", load("x", "i0", "r0"), load("bias", "r0")), load("w", "r0", "i1")),
        ("relu", (m, n)),
        ex.op("max", ACC, 0.0),
    )
    return Case("running_example", kernel, lambda x, bias, w: torch.relu((x + bias) @ w))


def matmul(m: int, k: int, n: int, name: str = "matmul", dtype=F32) -> Case:
    kernel = contraction(
        "mm",
        {"a": (m, k), "b": (k, n)},
        [("i0", m), ("i1", n)],
        ("r0", k),
        ex.op("mul", load("a", "i0", "r0", dtype=dtype), load("b", "r0", "i1", dtype=dtype)),
        ("out", (m, n)),
        ex.Var("acc0", dtype),
        dtype=dtype,
    )
    return Case(name, kernel, lambda a, b: a @ b)


def half_inputs(m: int, k: int, n: int) -> Case:
    """float16 operands multiplied and summed in float32: staged with plain loads and stores."""
    f16 = dtypes.float16
    kernel = contraction(
        "mm_half",
        {"a": (m, k), "b": (k, n)},
        [("i0", m), ("i1", n)],
        ("r0", k),
        ex.op("mul", ex.cast(load("a", "i0", "r0", dtype=f16), F32), ex.cast(load("b", "r0", "i1", dtype=f16), F32)),
        ("out", (m, n)),
        input_dtype=f16,
    )
    return Case("half_inputs", kernel, lambda a, b: a @ b)


def matmul_a_transposed(m: int, k: int, n: int) -> Case:
    """``a.T @ b`` with ``a`` stored (K, M): the rows' operand is contiguous along M."""
    kernel = contraction(
        "mm_at",
        {"a": (k, m), "b": (k, n)},
        [("i0", m), ("i1", n)],
        ("r0", k),
        ex.op("mul", load("a", "r0", "i0"), load("b", "r0", "i1")),
        ("out", (m, n)),
    )
    return Case("a_transposed", kernel, lambda a, b: a.T @ b)


def linear(m: int, k: int, n: int, bias_relu: bool = False) -> Case:
    """``x @ w.T`` with ``w`` stored (N, K), as a linear layer keeps its weight; optionally ``relu(. + bias)``."""
    inputs = {"x": (m, k), "w": (n, k)}
    store: ex.Expr = ACC
    if bias_relu:
        inputs["bias"] = (n,)
        store = ex.op("max", ex.op("add", ACC, load("bias", "i1")), 0.0)
    kernel = contraction(
        "linear",
        inputs,
        [("i0", m), ("i1", n)],
        ("r0", k),
        ex.op("mul", load("x", "i0", "r0"), load("w", "i1", "r0")),
        ("out", (m, n)),
        store,
    )
    if bias_relu:
        return Case("linear_bias_relu", kernel, lambda x, w, bias: torch.relu(x @ w.T + bias))
    return Case("transposed_operand", kernel, lambda x, w: x @ w.T)


def batched(batch: int, m: int, k: int, n: int) -> Case:
    kernel = contraction(
        "bmm",
        {"a": (batch, m, k), "b": (batch, k, n)},
        [("i0", batch), ("i1", m), ("i2", n)],
        ("r0", k),
        ex.op("mul", load("a", "i0", "i1", "r0"), load("b", "i0", "r0", "i2")),
        ("out", (batch, m, n)),
    )
    return Case("batched", kernel, lambda a, b: torch.bmm(a, b))


def batched_scores(batch: int, m: int, k: int, n: int) -> Case:
    """``q @ k^T`` per batch, both stored K-major, as attention scores multiply."""
    kernel = contraction(
        "scores",
        {"q": (batch, m, k), "kt": (batch, n, k)},
        [("i0", batch), ("i1", m), ("i2", n)],
        ("r0", k),
        ex.op("mul", load("q", "i0", "i1", "r0"), load("kt", "i0", "i2", "r0")),
        ("out", (batch, m, n)),
    )
    return Case("batched_scores", kernel, lambda q, kt: q @ kt.transpose(-1, -2))


def broadcast(batches: tuple[int, int], m: int, k: int, n: int) -> Case:
    """``a @ b`` with ``a`` of shape (B0, B1, M, K) and ``b`` (K, N) shared by every batch."""
    b0, b1 = batches
    kernel = contraction(
        "bcast",
        {"a": (b0, b1, m, k), "b": (k, n)},
        [("i0", b0), ("i1", b1), ("i2", m), ("i3", n)],
        ("r0", k),
        ex.op("mul", load("a", "i0", "i1", "i2", "r0"), load("b", "r0", "i3")),
        ("out", (b0, b1, m, n)),
    )
    return Case("broadcast", kernel, lambda a, b: a @ b)


def row_scaled(m: int, k: int, n: int) -> Case:
    """A load that does not move with the reduction inside the sum: ``(x * s[:, None]) @ w``."""
    kernel = contraction(
        "scaled",
        {"x": (m, k), "s": (m,), "w": (k, n)},
        [("i0", m), ("i1", n)],
        ("r0", k),
        ex.op("mul", ex.op("mul", load("x", "i0", "r0"), load("s", "i0")), load("w", "r0", "i1")),
        ("out", (m, n)),
    )
    return Case("row_scaled", kernel, lambda x, s, w: (x * s[:, None]) @ w)


def simulate_case(case: Case, kernel_ir_kernel, inputs: dict[str, torch.Tensor]):
    """Run the lowered kernel on the simulator; returns (the output, the report)."""
    from lamina.backends.reference.simulator import simulate

    arrays = {name: t.reshape(-1).clone() for name, t in inputs.items()}
    for b in case.kernel.outputs:
        arrays[b.name] = torch.full((math.prod(b.type.shape),), float("nan"), dtype=torch_dtype(b.type.dtype))
    report = simulate(kernel_ir_kernel, arrays, raise_on_fault=True)
    (out,) = case.kernel.outputs
    return arrays[out.name].reshape(out.type.shape), report


THREE_KERNELS = ("lamina.builtin.schedules.attention",)
"""Attention's products, softmax and values as three kernels, as without the attention schedule
(which fuses them where it expects to gain): the products' path is what these tests check."""


def rewritten(body, change):
    """Kernel IR ``body`` with each statement replaced by ``change(statement)`` (a list), inside loops and
    branches too: how a test plants a fault in a lowered kernel."""
    out = []
    for s in body:
        if isinstance(s, kernel_ir.For):
            s = attrs.evolve(s, body=rewritten(s.body, change))
        elif isinstance(s, kernel_ir.If):
            s = attrs.evolve(s, then=rewritten(s.then, change), orelse=rewritten(s.orelse, change))
        out += change(s)
    return tuple(out)

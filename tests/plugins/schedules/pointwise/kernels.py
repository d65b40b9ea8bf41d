"""Pointwise kernels written directly in Loop IR, as the frontend lowers them, with the
eager PyTorch function each must match."""

from __future__ import annotations

import math
from typing import Callable

import attrs
import torch

from lamina.backends.reference.simulator import simulate
from lamina.core.ir import dtypes, expr as ex, kernel_ir, loop_ir
from lamina.core.ir.dtypes import DType
from lamina.core.ir.torch_ir import TensorType
from lamina.runtime.program_runner import ProgramRunner, torch_dtype

F32, BF16 = dtypes.float32, dtypes.bfloat16


def loop_vars(rank: int) -> tuple[ex.Var, ...]:
    return tuple(ex.Var(f"i{k}") for k in range(rank))


def load(buffer: str, index, dtype: DType) -> loop_ir.Load:
    return loop_ir.Load(buffer, tuple(ex.const(i) if isinstance(i, int) else i for i in index), dtype)


@attrs.frozen
class Case:
    """A Loop IR kernel and the eager PyTorch function of its inputs (in kernel order)."""

    id: str
    kernel: loop_ir.Kernel
    reference: Callable[..., torch.Tensor]

    def inputs(self, seed: int = 0) -> list[torch.Tensor]:
        generator = torch.Generator().manual_seed(seed)
        return [torch.randn(b.type.shape, generator=generator).to(torch_dtype(b.type.dtype)) for b in self.kernel.inputs]

    @property
    def dtype(self) -> DType:
        return self.kernel.outputs[0].type.dtype


def pointwise_kernel(name: str, inputs: dict[str, tuple[tuple[int, ...], DType]], loop_shape: tuple[int, ...],
                     out: tuple[tuple[int, ...], DType], value: Callable[[tuple[ex.Var, ...]], ex.Expr],
                     out_index: Callable[[tuple[ex.Var, ...]], tuple] = lambda i: i) -> loop_ir.Kernel:
    """``out[out_index(i)] = value(i)`` over parallel loops ``i`` of ``loop_shape``."""
    i = loop_vars(len(loop_shape))
    body: list[loop_ir.Stmt] = [loop_ir.Store("out", out_index(i), value(i))]
    for var, extent in reversed(list(zip(i, loop_shape))):
        body = [loop_ir.Loop(var.name, extent, "parallel", body)]
    kernel = loop_ir.Kernel(
        name,
        [loop_ir.Buffer(n, TensorType(shape, dtype)) for n, (shape, dtype) in inputs.items()],
        [loop_ir.Buffer("out", TensorType(*out))],
        body,
    )
    loop_ir.verify_kernel(kernel)
    return kernel


def _in_float32(e: ex.Expr) -> ex.Expr:
    return ex.cast(e, F32)


def silu_up(shape, dtype=F32) -> Case:
    """``silu(gate) * up``: silu in float32, rounded to the dtype, then the product."""

    def value(i):
        gate = _in_float32(load("gate", i, dtype))
        silu = ex.cast(ex.op("mul", gate, ex.op("sigmoid", gate)), dtype)
        return ex.op("mul", silu, load("up", i, dtype))

    kernel = pointwise_kernel("silu_up", {"gate": (shape, dtype), "up": (shape, dtype)}, shape, (shape, dtype), value)
    return Case(f"silu_up_{_shape_id(shape)}_{dtype}", kernel, lambda gate, up: torch.nn.functional.silu(gate) * up)


def add(shape, dtype=F32) -> Case:
    kernel = pointwise_kernel("add", {"a": (shape, dtype), "b": (shape, dtype)}, shape, (shape, dtype),
                              lambda i: ex.op("add", load("a", i, dtype), load("b", i, dtype)))
    return Case(f"add_{_shape_id(shape)}_{dtype}", kernel, lambda a, b: a + b)


def cast(shape, dtype=F32) -> Case:
    """``(x * 2).to(bfloat16)`` from float32; from bfloat16 the other way, to float32."""
    target = BF16 if dtype == F32 else F32
    kernel = pointwise_kernel("cast", {"x": (shape, dtype)}, shape, (shape, target),
                              lambda i: ex.cast(ex.op("mul", load("x", i, dtype), ex.Const(2.0, dtype)), target))
    torch_target = torch_dtype(target)
    return Case(f"cast_{_shape_id(shape)}_{dtype}", kernel, lambda x: (x * 2).to(torch_target))


def broadcast_row(shape, dtype=F32) -> Case:
    """``x + w[None, :]``: ``w`` follows the innermost loop, so it is contiguous too."""
    rows, cols = shape
    kernel = pointwise_kernel("broadcast_row", {"x": (shape, dtype), "w": ((cols,), dtype)}, shape, (shape, dtype),
                              lambda i: ex.op("add", load("x", i, dtype), load("w", (i[1],), dtype)))
    return Case(f"broadcast_row_{_shape_id(shape)}_{dtype}", kernel, lambda x, w: x + w[None, :])


def broadcast_column(shape, dtype=F32) -> Case:
    """``x * w[:, None]``: ``w`` is the same for a whole row, one scalar per element."""
    rows, cols = shape
    kernel = pointwise_kernel("broadcast_column", {"x": (shape, dtype), "w": ((rows,), dtype)}, shape, (shape, dtype),
                              lambda i: ex.op("mul", load("x", i, dtype), load("w", (i[0],), dtype)))
    return Case(f"broadcast_column_{_shape_id(shape)}_{dtype}", kernel, lambda x, w: x * w[:, None])


def transpose(shape, dtype=F32) -> Case:
    """``x.t() + 1``: the load walks a column of ``x``, so it stays scalar."""
    rows, cols = shape
    kernel = pointwise_kernel("transpose", {"x": (shape, dtype)}, (cols, rows), ((cols, rows), dtype),
                              lambda i: ex.op("add", load("x", (i[1], i[0]), dtype), ex.Const(1.0, dtype)))
    return Case(f"transpose_{_shape_id(shape)}_{dtype}", kernel, lambda x: x.t() + 1)


def transposed_store(shape, dtype=F32) -> Case:
    """``(x * 3).t()`` written while walking ``x``: vector loads, a scalar store per element."""
    rows, cols = shape
    kernel = pointwise_kernel("transposed_store", {"x": (shape, dtype)}, shape, ((cols, rows), dtype),
                              lambda i: ex.op("mul", load("x", i, dtype), ex.Const(3.0, dtype)),
                              out_index=lambda i: (i[1], i[0]))
    return Case(f"transposed_store_{_shape_id(shape)}_{dtype}", kernel, lambda x: (x * 3).t())


def rope(heads: int, seq: int, dim: int, dtype=F32) -> Case:
    """``x * cos + torch.cat((-x[..., h:], x[..., :h]), -1) * sin`` with ``h = dim // 2``."""
    half = dim // 2

    def value(i):
        _, head, pos, d = i
        rotated = ex.op(
            "where", ex.op("lt", d, half),
            ex.op("neg", load("x", (0, head, pos, d % half + half), dtype)),
            load("x", (0, head, pos, d % half), dtype),
        )
        straight = ex.op("mul", load("x", i, dtype), load("cos", (pos, d), dtype))
        return ex.op("add", straight, ex.op("mul", rotated, load("sin", (pos, d), dtype)))

    shape = (1, heads, seq, dim)
    kernel = pointwise_kernel("rope", {"x": (shape, dtype), "cos": ((seq, dim), dtype), "sin": ((seq, dim), dtype)},
                              shape, (shape, dtype), value)

    def reference(x, cos, sin):
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin

    return Case(f"rope_{_shape_id(shape)}_{dtype}", kernel, reference)


def cat_last(rows: int, widths: tuple[int, ...], dtype=F32) -> Case:
    """``torch.cat(parts, -1) * 2`` as the frontend writes it: part ``k`` read at ``(i1 -
    start_k) mod width_k`` where ``i1 < end_k``, an index in bounds in every element."""
    names = [f"p{k}" for k in range(len(widths))]
    starts = [sum(widths[:k]) for k in range(len(widths))]

    def value(i):
        row, column = i
        chosen = load(names[-1], (row, (column + -starts[-1] % widths[-1]) % widths[-1]), dtype)
        for name, start, width in reversed(list(zip(names, starts, widths))[:-1]):
            chosen = ex.op("where", ex.op("lt", column, start + width), load(name, (row, (column + -start % width) % width), dtype), chosen)
        return ex.op("mul", chosen, ex.Const(2.0, dtype))

    shape = (rows, sum(widths))
    kernel = pointwise_kernel("cat_last", {n: ((rows, w), dtype) for n, w in zip(names, widths)}, shape,
                              (shape, dtype), value)
    return Case(f"cat_last_{rows}x{'_'.join(map(str, widths))}_{dtype}", kernel,
                lambda *parts: torch.cat(parts, -1) * 2)


def _shape_id(shape) -> str:
    return "x".join(map(str, shape))


def run_on_simulator(case: Case, kernel: kernel_ir.Kernel, inputs: list[torch.Tensor]):
    """The kernel's output for ``inputs``, and the simulator's report."""
    reports = []
    loop = loop_ir.Program(case.kernel.inputs, case.kernel.outputs, (), (case.kernel,))

    def launch(k, buffers, sizes):
        reports.append(simulate(k, buffers, raise_on_fault=False))

    (out,) = ProgramRunner(loop, kernel_ir.Program((kernel,)), launch, torch.device("cpu"))(*inputs)
    (report,) = reports
    return out, report


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    expected = expected.double()
    return ((got.double() - expected).norm() / expected.norm()).item()


def tolerance(case: Case) -> float:
    """float32 agrees with float64 to rounding; bfloat16 results carry its 8-bit mantissa."""
    dtypes_used = {b.type.dtype for b in case.kernel.inputs + case.kernel.outputs}
    return 1e-2 if BF16 in dtypes_used else 1e-5


def every_width(extent: int, largest: int = 16) -> list[int]:
    """The vector widths a kernel with rows of ``extent`` elements can take."""
    return [w for w in (2 ** k for k in range(int(math.log2(largest)) + 1)) if extent % w == 0]

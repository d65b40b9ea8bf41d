"""Tensor IR programs written by hand, with the PyTorch functions they compute.

The lowering, fusion and schedule tests start from these so that they depend on no
frontend.
"""

from __future__ import annotations

import itertools

import attrs
import torch

from lamina.core.ir import dtypes, expr as ex, tensor_ir as T
from lamina.core.ir.torch_ir import TensorType

f32 = dtypes.float32


class TensorProgramBuilder:
    """Appends Tensor IR ops, naming each value after its op (``add``, ``add_1`` ...)."""

    def __init__(self, dtype=f32):
        self.dtype = dtype
        self.inputs: list[T.Value] = []
        self.ops: list[T.TensorOp] = []
        self.types: dict[str, TensorType] = {}
        self._used: set[str] = set()

    def _name(self, base: str) -> str:
        for name in itertools.chain([base], (f"{base}_{k}" for k in itertools.count(1))):
            if name not in self._used:
                self._used.add(name)
                return name

    def input(self, name: str, *shape: int) -> str:
        self._used.add(name)
        value = T.Value(name, TensorType(shape, self.dtype))
        self.inputs.append(value)
        self.types[name] = value.type
        return name

    def _add(self, op) -> str:
        self.ops.append(op)
        self.types[op.name] = op.type
        return op.name

    def index_map(self, source: str, shape: tuple[int, ...], index, base: str = "expand") -> str:
        """``index(d)`` gives the source coordinates from the output coordinates ``d``."""
        d = T.output_vars(len(shape))
        coords = tuple(ex.const(c) if isinstance(c, int) else c for c in index(d))
        return self._add(T.IndexMap(self._name(base), source, coords, TensorType(shape, self.types[source].dtype)))

    def elementwise(self, base: str, fn, *sources: str) -> str:
        """``fn(*args)`` builds the scalar function from one ``Arg`` per source."""
        shape = self.types[sources[0]].shape if sources else None
        args = [T.Arg(k, self.types[s].dtype) for k, s in enumerate(sources)]
        body = fn(*args)
        return self._add(T.Elementwise(self._name(base), sources, body, TensorType(shape, body.dtype)))

    def fill(self, base: str, value: float, shape: tuple[int, ...]) -> str:
        body = ex.Const(float(value), self.dtype)
        return self._add(T.Elementwise(self._name(base), (), body, TensorType(shape, self.dtype)))

    def reduce(self, source: str, axes: tuple[int, ...], op: str = "sum", keepdim: bool = False, base: str | None = None) -> str:
        in_shape = self.types[source].shape
        shape = tuple(1 if d in axes else s for d, s in enumerate(in_shape) if keepdim or d not in axes)
        t = TensorType(shape, self.types[source].dtype)
        return self._add(T.Reduction(self._name(base or op), source, axes, op, keepdim, t))

    def program(self, *outputs: str) -> T.Program:
        program = T.Program(self.inputs, self.ops, outputs)
        T.verify_program(program)
        return program


def add(a, b):
    return ex.op("add", a, b)


def mul(a, b):
    return ex.op("mul", a, b)


def matmul(b: TensorProgramBuilder, left: str, right: str) -> str:
    """``left @ right`` for (..., m, k) @ (k, n) or batched (B, m, k) @ (B, k, n), as the decompositions write it."""
    lshape, rshape = b.types[left].shape, b.types[right].shape
    batch = lshape[:-2]
    m, k = lshape[-2:]
    n = rshape[-1]
    shape = batch + (m, k, n)
    nb = len(batch)
    lhs = b.index_map(left, shape, lambda d: d[:nb] + (d[nb], d[nb + 1]))
    if len(rshape) == 2:
        rhs = b.index_map(right, shape, lambda d: (d[nb + 1], d[nb + 2]))
    else:
        rhs = b.index_map(right, shape, lambda d: d[:nb] + (d[nb + 1], d[nb + 2]))
    product = b.elementwise("mul", mul, lhs, rhs)
    return b.reduce(product, (nb + 1,), "sum")


@attrs.frozen
class Case:
    """A Tensor IR program, the shapes of its inputs, and what PyTorch computes from them."""

    id: str
    program: T.Program
    reference: object

    def inputs(self) -> list[torch.Tensor]:
        return [torch.randn(v.type.shape, dtype=torch.float64) for v in self.program.inputs]


def running_example(m: int = 16, k: int = 64, n: int = 16) -> T.Program:
    """``torch.relu(torch.matmul(x + bias, w))``."""
    b = TensorProgramBuilder()
    x, bias, w = b.input("x", m, k), b.input("bias", k), b.input("w", k, n)
    biased = b.index_map(bias, (m, k), lambda d: (d[1],))
    total = b.elementwise("add", add, x, biased)
    product = matmul(b, total, w)
    return b.program(b.elementwise("relu", lambda a: ex.op("max", a, 0.0), product))


def batched_matmul() -> T.Program:
    b = TensorProgramBuilder()
    return b.program(matmul(b, b.input("a", 3, 17, 20), b.input("b", 3, 20, 9)))


def broadcast_transpose() -> T.Program:
    """``a.transpose(0, 1) * v`` with a (7, 5) and v (7,)."""
    b = TensorProgramBuilder()
    a, v = b.input("a", 7, 5), b.input("v", 7)
    transposed = b.index_map(a, (5, 7), lambda d: (d[1], d[0]), base="transpose")
    widened = b.index_map(v, (5, 7), lambda d: (d[1],))
    return b.program(b.elementwise("mul", mul, transposed, widened))


def sum_keepdim_minus_input() -> T.Program:
    """``x.sum(dim=1, keepdim=True) - x`` with x (6, 37)."""
    b = TensorProgramBuilder()
    x = b.input("x", 6, 37)
    total = b.reduce(x, (1,), "sum", keepdim=True)
    widened = b.index_map(total, (6, 37), lambda d: (d[0], 0))
    return b.program(b.elementwise("sub", lambda s, v: ex.op("sub", s, v), widened, x))


def mean(shape=(5, 8), keepdim: bool = False) -> T.Program:
    """``x.mean(dim=-1)`` as the decompositions write it: a sum times 1/n."""
    b = TensorProgramBuilder()
    x = b.input("x", *shape)
    total = b.reduce(x, (len(shape) - 1,), "sum", keepdim=keepdim)
    return b.program(b.elementwise("mean", lambda s: mul(s, 1.0 / shape[-1]), total))


def two_reductions_one_epilogue() -> T.Program:
    """``x.sum(1) + y.amax(1)``: the epilogue reads a reduction written after the first."""
    b = TensorProgramBuilder()
    x, y = b.input("x", 4, 11), b.input("y", 4, 13)
    s = b.reduce(x, (1,), "sum")
    m = b.reduce(y, (1,), "max")
    return b.program(b.elementwise("add", add, s, m))


def matmul_view_bias() -> T.Program:
    """``(x @ w).view(2, 3, 10) + bias``: a linear layer on a batch, as it is decomposed."""
    b = TensorProgramBuilder()
    x, w, bias = b.input("x", 6, 8), b.input("w", 8, 10), b.input("bias", 10)
    product = matmul(b, x, w)
    view = b.index_map(product, (2, 3, 10), lambda d: (d[0] * 3 + d[1], d[2]), base="view")
    widened = b.index_map(bias, (2, 3, 10), lambda d: (d[2],))
    return b.program(b.elementwise("add", add, view, widened))


def transposed_sum() -> T.Program:
    """``x.sum(1).t() * 2`` with x (4, 6, 5)."""
    b = TensorProgramBuilder()
    x = b.input("x", 4, 6, 5)
    total = b.reduce(x, (1,), "sum")
    flipped = b.index_map(total, (5, 4), lambda d: (d[1], d[0]), base="transpose")
    return b.program(b.elementwise("double", lambda a: mul(a, 2.0), flipped))


def running_example_reference(x, bias, w):
    return torch.relu(torch.matmul(x + bias, w))


CASES = [
    Case("running_example", running_example(), running_example_reference),
    Case("ragged_matmul", running_example(17, 65, 19), running_example_reference),
    Case("batched_matmul", batched_matmul(), torch.bmm),
    Case("broadcast_transpose", broadcast_transpose(), lambda a, v: a.transpose(0, 1) * v),
    Case("sum_keepdim", sum_keepdim_minus_input(), lambda x: x.sum(dim=1, keepdim=True) - x),
    Case("mean", mean(), lambda x: x.mean(dim=-1)),
    Case("mean_keepdim", mean((3, 4, 9), keepdim=True), lambda x: x.mean(dim=-1, keepdim=True)),
    Case("matmul_view_bias", matmul_view_bias(), lambda x, w, bias: (x @ w).view(2, 3, 10) + bias),
    Case("transposed_sum", transposed_sum(), lambda x: x.sum(1).t() * 2),
    Case("two_reductions_one_epilogue", two_reductions_one_epilogue(), lambda x, y: x.sum(1) + y.amax(1)),
]

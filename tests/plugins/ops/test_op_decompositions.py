"""Every built-in decomposition against eager PyTorch, through the Tensor IR interpreter, on random data."""

from __future__ import annotations

import functools

import pluggy
import pytest
import torch
import torch.nn.functional as F

from lamina.core import hookspecs
from lamina.plugins.ops import plugin
from lamina.plugins.ops.plugin import DECOMPOSITIONS
from tests.plugins.ops.lowering import Case, assert_matches, flatten, lower, run
from tests.plugins.ops.division_op_cases import DIVISION_OP_CASES
from tests.plugins.ops.image_op_cases import IMAGE_OP_CASES
from tests.plugins.ops.model_op_cases import MODEL_OP_CASES

aten = torch.ops.aten


def randn(*shape, dtype=torch.float32):
    return torch.randn(shape, dtype=dtype)


def positive(*shape):
    return torch.rand(shape) + 0.1


def integers(*shape, dtype=torch.int32):
    return torch.randint(-5, 6, shape, dtype=dtype)


KEEP_COMPOSITES = ("aten.t.default", "aten.transpose.int", "aten.squeeze.dim", "aten.squeeze.default",
                   "aten._unsafe_view.default", "aten.detach.default", "aten.matmul.default", "aten.sum.default")
"""Composites that export lowers by default; kept here so that their decompositions run too."""


def elementwise(x, y, i, j, p):
    arithmetic = (x + y, x - y, x * y, x / y, torch.add(x, y, alpha=2), torch.sub(x, y, alpha=0.5), y - x,
                  x + 2, 3.5 - x, x * 3, x / 4, aten.add.Scalar(x, 2.0, 3), aten.sub.Scalar(x, 1),
                  aten.mul.Scalar(x, 3), aten.div.Scalar(x, 2))
    integer = (i + j, i * 2, i / 2, i - 1, i + 0.5, torch.add(i, j, alpha=3), i + x)
    unary = (-x, torch.relu(x), p.exp(), p.log(), p.sqrt(), p.rsqrt(), x.abs(), x.sigmoid(), x.tanh(),
             p.reciprocal(), x.sin(), x.cos(), torch.erf(x))
    binary = (torch.maximum(x, y), torch.minimum(x, y), x ** 2, p ** 0.5, p ** y, 2 ** x)
    compare = (x > y, x >= y, x < y, x <= y, i == j, i != j, x > 0.1, x >= 0.1, x < 0.1, x <= 0.1, i == 2, i != 2)
    select = (torch.where(x > 0, x, y), torch.where(x > 0, x, 0.0), x.clamp(min=-0.5), x.clamp(max=0.5),
              x.clamp(-0.5, 0.5), torch.clamp(x, min=y - 1, max=p + 1))
    return arithmetic + integer + unary + binary + compare + select


def copies_and_views(x, s):
    casts = (s.half(), s.double(), s.int(), s.to(torch.bfloat16), s.half().float(), s.clone(), s.detach())
    fills = (torch.ones(3, 4) + s, torch.zeros_like(s), torch.full((3, 4), 2.5) * s, s + torch.tensor([1.0, 2.0, 3.0, 4.0]))
    views = (x.view(6, 4), x.reshape(4, 6), x.permute(2, 0, 1), x.transpose(0, 2), x.expand(5, 2, 3, 4), x.unsqueeze(1),
             x.view(2, 1, 3, 4).squeeze(1), x[:, 1:3], x[..., ::2], x[:, 0], x[1:, -1], x.permute(2, 0, 1).reshape(4, 6),
             x.flatten(), x[None])
    return casts + fills + views


def composites(s, v, m, w):
    views = (s.t(), s.transpose(0, 1), s.view(1, 3, 1, 4).squeeze(0), s.view(1, 3, 1, 4).squeeze(),
             aten._unsafe_view.default(s, [4, 3]), s.detach(), aten.sum.default(s))
    products = (v @ m, w @ v, v @ v, torch.matmul(torch.ones(2, 4, 7), m))
    return views + products


def products(a, b, c, d, e, f, bias, x, w):
    return (a @ b, torch.matmul(c, d), e @ f.transpose(-1, -2), c @ b[:, :9],
            torch.addmm(bias, a, b, beta=0.5, alpha=2), torch.addmm(bias, a, b, beta=0), torch.addmm(bias, a, b),
            F.linear(a, b.t()), torch.relu(torch.matmul(x + bias[:16].repeat(4), w)))


def reductions(x, p, i, h):
    return (x.sum(1, keepdim=True), x.sum(), x.sum((0, 2)), x.mean(-1), x.mean(), x.mean((0, 1), keepdim=True),
            x.amax(1), x.amin((0, 1), keepdim=True), x.max(), x.min(), p.prod(1), p.prod(), torch.var(x, 1),
            torch.var_mean(x, (0, 2), keepdim=True), torch.var_mean(x, 1, correction=0),
            i.sum(1), i.sum(), h.sum(1), h.mean(0), x.sum(dtype=torch.float64), x.mean(1, dtype=torch.float64),
            *x.max(1), *x.min(-1, keepdim=True), *i.max(0), x.argmax(2), x.argmin(), i.argmax(1, keepdim=True),
            h.argmin(None, keepdim=True))


class Layer(torch.nn.Module):
    """A linear layer (a parameter and a bias), then activations of its result."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(65, 19)

    def forward(self, x, h):
        y = self.linear(x)
        return (y, F.silu(y), F.gelu(y), F.gelu(y, approximate="tanh"), y.softmax(-1), F.log_softmax(y, 0),
                h.softmax(-1), F.log_softmax(h, 1))


CASES = [
    Case("elementwise", elementwise,
         lambda: (randn(17, 65), randn(65), integers(17, 65), integers(65, dtype=torch.int64), positive(17, 65))),
    Case("copies-and-views", copies_and_views, lambda: (randn(2, 3, 4), randn(3, 4))),
    Case("composites-kept-whole", composites, lambda: (randn(3, 4), randn(7), randn(7, 5), randn(4, 7)),
         keep=KEEP_COMPOSITES),
    Case("products", products,
         lambda: (randn(17, 65), randn(65, 19), randn(3, 17, 65), randn(3, 65, 19), randn(2, 1, 5, 7), randn(3, 9, 7),
                  randn(19), randn(16, 64), randn(64, 16))),
    Case("reductions", reductions,
         lambda: (randn(5, 6, 7), torch.rand(5, 6, 7) * 0.2 + 0.9, integers(5, 6), randn(33, 40, dtype=torch.float16))),
    Case("layer-kept-whole", Layer(), lambda: (randn(3, 5, 65), randn(6, 33, dtype=torch.float16))),
    Case("layer-in-core-aten", Layer(), lambda: (randn(17, 65), randn(6, 33, dtype=torch.float16)), keep=()),
    *MODEL_OP_CASES,
    *IMAGE_OP_CASES,
    *DIVISION_OP_CASES,
]

CUDA_ONLY = {"aten._scaled_dot_product_flash_attention.default", "aten._scaled_dot_product_efficient_attention.default",
             "aten._scaled_dot_product_cudnn_attention.default",
             "aten._scaled_dot_product_fused_attention_overrideable.default"}
"""Attention kernels that eager PyTorch runs on CUDA alone, so no case here can compute them: the conformance
cases check them against the computation each stands for, and tests/frontends/test_cuda_attention_graphs.py
compiles the graphs that AOTAutograd writes with them."""
FROM_DYNAMO_ONLY = {"aten.lift_fresh_copy.default", "prims.convert_element_type.default"}
"""What only Dynamo's graphs hold (a tensor built from Python data, which export folds; a number of sizes
known only at run time made a tensor): the torch.compile tests, the model matrix and the symbolic-size tests
run them."""


@functools.cache
def lowered(case_id: str):
    """Capture once per case: the shapes are fixed, the data is fresh for each test."""
    case = next(c for c in CASES if c.id == case_id)
    return lower(case.program, case.inputs(), keep=case.keep)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_decompositions_match_eager_pytorch(case):
    captured, program = lowered(case.id)
    inputs = case.inputs()
    with torch.no_grad():
        expected = flatten(case.program(*inputs))
    actual = run(captured, program, inputs)
    assert len(actual) == len(expected)
    for k, (a, e) in enumerate(zip(actual, expected)):
        assert_matches(a, e, f"{case.id} output {k} ({captured.graph.outputs[k]})")


def test_every_registered_decomposition_is_exercised():
    used = {node.target for case in CASES for node in lowered(case.id)[0].graph.nodes}
    assert set(DECOMPOSITIONS) - used - CUDA_ONLY - FROM_DYNAMO_ONLY == set()


def test_the_plugin_registers_every_decomposition_through_the_hook():
    registered = {}

    def register(op, decomposition, priority=0):
        registered[op] = (decomposition, priority)

    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    manager.register(plugin)
    manager.check_pending()
    manager.hook.lamina_register_ops(register=register)
    assert registered == {op: (fn, 0) for op, fn in DECOMPOSITIONS.items()}


def test_a_triangle_of_ones_is_the_comparison_of_its_coordinates_alone():
    """Export writes ``ones(n, n).triu(1)`` as ``(col - row >= 1) and ones``; the ``and ones`` is dropped."""

    def masked(x):
        return x.masked_fill(torch.ones(x.shape[-2], x.shape[-1], dtype=torch.bool).triu(1), 0.0)

    x = torch.randn(5, 7)
    captured, program = lower(masked, (x,))
    assert not any(getattr(op.fn, "op", None) == "and" for op in program.ops if hasattr(op, "fn"))
    assert_matches(run(captured, program, (x,))[0], masked(x), "masked")

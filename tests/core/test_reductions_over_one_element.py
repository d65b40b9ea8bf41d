"""A reduction over axes of size 1 is its one element: the Tensor IR builder writes no Reduction for it."""

import pytest
import torch

import lamina
from lamina.backends.reference.interpreter import interpret
from lamina.core.ir import dtypes, tensor_ir
from lamina.core.ir.tensor_builder import TensorBuilder
from lamina.core.ir.torch_ir import Input, TensorType

SOFTMAX_OF_ONE_ELEMENT = """\
tensor_program(x: f32[3, 1]):
    sub: f32[3, 1] = elementwise x - x
    exp: f32[3, 1] = elementwise exp(sub)
    div: f32[3, 1] = elementwise exp / exp
    return (div,)"""


def builder(shape, dtype=dtypes.float32) -> TensorBuilder:
    return TensorBuilder([Input("x", TensorType(shape, dtype))])


def test_softmax_over_one_element_keeps_its_math_without_a_reduction():
    b = builder((3, 1))
    shifted = b.binary("sub", "x", b.max("x", -1, keepdim=True))
    exps = b.unary("exp", shifted)
    result = b.binary("div", exps, b.sum(exps, -1, keepdim=True))
    assert tensor_ir.format_program(b.program([result])) == SOFTMAX_OF_ONE_ELEMENT


def test_without_keepdim_the_axis_is_dropped_by_a_view():
    b = builder((4, 1, 5))
    total = b.reduction("x", [1], "sum")
    (op,) = b.program([total]).ops
    assert tensor_ir.format_op(op) == f"{total}: f32[4, 5] = index_map (d0, d1) -> x[d0, 0, d1]"


def test_a_reduction_over_a_longer_axis_stays_a_reduction():
    b = builder((4, 2))
    (op,) = b.program([b.reduction("x", [1], "sum", keepdim=True)]).ops
    assert isinstance(op, tensor_ir.Reduction)


@pytest.mark.parametrize("reduce, shape, dtype", [
    (lambda x: x.sum(-1), (3, 1), torch.float32),
    (lambda x: x.sum(-1, keepdim=True), (3, 1), torch.float32),
    (lambda x: x.amax((0, 2)), (1, 6, 1), torch.float32),
    (lambda x: x.amin(-1) * 2.0, (4, 1), torch.float32),
    (lambda x: x.prod(1), (3, 1, 5), torch.float32),
    (lambda x: x.mean(-1), (5, 1), torch.bfloat16),
    (lambda x: x.sum(-1), (5, 1), torch.bfloat16),
    (lambda x: x.sum(-1), (5, 1), torch.int32),
    (lambda x: x.sum(), (1,), torch.float32),
    (lambda x: torch.softmax(x, -1), (3, 1), torch.float32),
    (lambda x: torch.log_softmax(x, 0), (1, 4), torch.float32),
], ids=["sum", "sum_keepdim", "amax_two_axes", "amin", "prod", "mean_bf16", "sum_bf16", "sum_int32",
        "sum_all_of_one", "softmax", "log_softmax"])
def test_results_and_dtypes_are_pytorchs(reduce, shape, dtype):
    generator = torch.Generator().manual_seed(0)
    if dtype.is_floating_point:
        x = torch.randn(shape, generator=generator).to(dtype)
    else:
        x = torch.randint(-9, 9, shape, generator=generator, dtype=dtype)
    specialization = lamina.Compiler().specialize(reduce, (x,))
    compilation = specialization.compilation
    assert not any(isinstance(op, tensor_ir.Reduction) for op in compilation.tensor.ops)
    want = reduce(x)
    (interpreted,) = interpret(compilation.tensor, {"x": x})
    (simulated,) = specialization((x,), torch.device("cpu"))
    for got in (interpreted, simulated):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got, want)

"""Cases for the ops that lamina decomposes itself.

Shapes are chosen for what breaks decompositions and schedules: sizes that are not
multiples of any tile (17, 33), axes of size 1, 0-d tensors, broadcasting, and inputs
reached through transposed or sliced views. One case per op is ``compiled``: it also
runs through the whole compiler, on the Kernel IR simulator and on the GPU.
"""

from __future__ import annotations

import torch

from lamina.testing.capabilities import FLOAT_DTYPES
from lamina.testing.cases.database import aten_op, register_cases
from lamina.testing.cases.samples import Case, T, unary_cases

INTEGERS = ("i32", "i64")
NUMBERS = FLOAT_DTYPES + INTEGERS + ("i16", "i8", "u8")


def binary_cases(rhs: str = "any", number=3, tensors: bool = True, lhs: str = "any", numbers: bool = False) -> list[Case]:
    """Samples of a binary op; ``numbers``: a ``.Tensor`` overload that also takes a Python number."""
    cases = [Case("python_number", (T((17, 33), values=lhs), number), compiled=not tensors)]
    if tensors:
        cases = (cases if numbers else []) + [
            Case("same_shape", (T((17, 33), values=lhs), T((17, 33), values=rhs)), compiled=True),
            Case("broadcast", (T((4, 1, 33), values=lhs), T((5, 1), values=rhs))),
            Case("zero_d_operand", (T((6, 7), values=lhs), T((), values=rhs))),
            Case("transposed", (T((9, 12), "transposed", lhs), T((9, 12), "sliced", rhs))),
            Case("size_one", (T((1, 1), values=lhs), T((1, 3), values=rhs))),
        ]
    return cases


def _alpha(name: str, tensors: bool) -> list[Case]:
    other = T((17, 33)) if tensors else 2
    return binary_cases(tensors=tensors, numbers=True) + [Case("alpha", (T((17, 33)), other), {"alpha": 2})]


for op, tensors in (("add", True), ("sub", True), ("add", False), ("sub", False)):
    overload = "Tensor" if tensors else "Scalar"
    register_cases(f"aten.{op}.{overload}", _alpha(op, tensors), dtypes=NUMBERS)
register_cases("aten.mul.Tensor", binary_cases(numbers=True), dtypes=NUMBERS)
register_cases("aten.mul.Scalar", binary_cases(tensors=False), dtypes=NUMBERS)
register_cases("aten.div.Tensor", binary_cases("nonzero", numbers=True), dtypes=FLOAT_DTYPES)
register_cases("aten.div.Scalar", binary_cases(tensors=False), dtypes=NUMBERS)
register_cases("aten.maximum.default", binary_cases(), dtypes=NUMBERS)
register_cases("aten.minimum.default", binary_cases(), dtypes=NUMBERS)
register_cases("aten.pow.Tensor_Scalar", binary_cases(tensors=False, number=2), dtypes=FLOAT_DTYPES)
register_cases("aten.pow.Tensor_Tensor", [Case("same_shape", (T((17, 33), values="positive"), T((17, 33))), compiled=True),
                                          Case("broadcast", (T((4, 1, 33), values="positive"), T((5, 1))))])
register_cases("aten.pow.Scalar", [Case("number_base", (2.0, T((17, 33))), compiled=True)])
for name in ("eq", "ne", "lt", "le", "gt", "ge"):
    register_cases(f"aten.{name}.Tensor", binary_cases(), dtypes=NUMBERS)
    register_cases(f"aten.{name}.Scalar", binary_cases(tensors=False, number=0), dtypes=NUMBERS)

for name in ("neg", "abs", "relu"):
    register_cases(f"aten.{name}.default", unary_cases(), dtypes=NUMBERS)
for name in ("exp", "sigmoid", "tanh", "sin", "cos", "erf"):
    register_cases(f"aten.{name}.default", unary_cases())
for name in ("log", "sqrt", "rsqrt", "reciprocal"):
    register_cases(f"aten.{name}.default", unary_cases("positive"))
register_cases("aten.silu.default", unary_cases())
register_cases("aten.gelu.default", unary_cases() + [Case("tanh", (T((17, 33)),), {"approximate": "tanh"})])

register_cases("aten.where.self", [
    Case("same_shape", (T((17, 33), dtype="b8"), T((17, 33)), T((17, 33))), compiled=True),
    Case("broadcast", (T((4, 1, 33), dtype="b8"), T((5, 1)), T(()))),
    Case("transposed", (T((9, 12), "transposed", dtype="b8"), T((9, 12), "transposed"), T((9, 12), "sliced"))),
], dtypes=NUMBERS)
register_cases("aten.clamp.default", [
    Case("both", (T((17, 33)), -0.5, 0.5), compiled=True),
    Case("low", (T((6, 7)),), {"min": -0.5}),
    Case("high", (T((9, 12), "transposed"),), {"max": 0.5}),
])
register_cases("aten.clamp.Tensor", [
    Case("both", (T((17, 33)), T((17, 33)), T((33,))), compiled=True),
    Case("broadcast", (T((4, 1, 33)), T((5, 1))), {"max": T(())}),
])

for name in ("softmax.int", "log_softmax.int"):
    register_cases(f"aten.{name}", [
        Case("last_axis", (T((17, 33)), -1), compiled=True),
        Case("first_axis", (T((5, 3, 29)), 0)),
        Case("transposed", (T((9, 12), "transposed"), 1)),
        Case("size_one", (T((4, 1)), 1)),
    ])


def _half_to_float(op):
    """``_softmax(x, dim, half_to_float=True)``: PyTorch's CPU kernels refuse it, so compute in float32."""
    return lambda x, dim, half_to_float: op(x.float() if half_to_float else x, dim, False)


for name in ("_softmax.default", "_log_softmax.default"):
    register_cases(f"aten.{name}", [
        Case("last_axis", (T((17, 33)), -1, False), compiled=True),
        Case("middle_axis", (T((5, 3, 29)), 1, False)),
        Case("half_to_float", (T((6, 7)), 1, True), dtypes=("f16",)),
    ], reference=_half_to_float(aten_op(f"aten.{name}")))

register_cases("aten.mm.default", [
    Case("ragged", (T((17, 33)), T((33, 19))), compiled=True),
    Case("size_one", (T((1, 5)), T((5, 1)))),
    Case("transposed", (T((12, 9), "transposed"), T((9, 16), "sliced"))),
], dtypes=("f64", "f32", "f16", "bf16"))
register_cases("aten.bmm.default", [
    Case("ragged", (T((3, 17, 20)), T((3, 20, 9))), compiled=True),
    Case("transposed", (T((2, 5, 8), "transposed"), T((2, 8, 3)))),
])
register_cases("aten.matmul.default", [
    Case("broadcast_batch", (T((2, 5, 12, 8)), T((8, 11))), compiled=True),
    Case("vector", (T((12, 8)), T((8,)))),
    Case("vector_lhs", (T((8,)), T((8, 5)))),
])
register_cases("aten.addmm.default", [
    Case("ragged", (T((19,)), T((17, 33)), T((33, 19))), compiled=True),
    Case("scaled", (T((17, 19)), T((17, 33)), T((33, 19))), {"beta": 0.5, "alpha": 2.0}),
    Case("beta_zero", (T((1, 19)), T((17, 33)), T((33, 19))), {"beta": 0}),
])
register_cases("aten.linear.default", [
    Case("bias", (T((9, 24)), T((13, 24)), T((13,))), compiled=True),
    Case("no_bias", (T((2, 5, 24)), T((13, 24)))),
    Case("transposed_input", (T((9, 24), "transposed"), T((13, 24)), T((13,)))),
])

VIEW_DTYPES = ("f32", "f16", "i64")
register_cases("aten.view.default", [
    Case("regroup", (T((6, 20)), [4, 30]), compiled=True),
    Case("infer", (T((2, 3, 5)), [-1, 5])),
    Case("to_scalar", (T((1, 1)), [])),
], dtypes=VIEW_DTYPES)
register_cases("aten._unsafe_view.default", [Case("regroup", (T((6, 20)), [4, 30]), compiled=True)], dtypes=VIEW_DTYPES)
register_cases("aten.permute.default", [
    Case("rotate", (T((2, 3, 5)), [2, 0, 1]), compiled=True),
    Case("transposed", (T((7, 9), "transposed"), [1, 0])),
], dtypes=VIEW_DTYPES)
register_cases("aten.transpose.int", [
    Case("matrix", (T((17, 33)), 0, 1), compiled=True),
    Case("negative_dims", (T((2, 3, 5)), -1, -3)),
], dtypes=VIEW_DTYPES)
register_cases("aten.t.default", [Case("matrix", (T((17, 33)),), compiled=True), Case("vector", (T((5,)),))],
               dtypes=VIEW_DTYPES)
register_cases("aten.expand.default", [
    Case("new_axes", (T((5, 1)), [3, 5, 4]), compiled=True),
    Case("keep_size", (T((1, 7)), [6, -1])),
], dtypes=VIEW_DTYPES)
register_cases("aten.unsqueeze.default", [
    Case("middle", (T((4, 6)), 1), compiled=True),
    Case("negative", (T((4, 6), "sliced"), -1)),
], dtypes=VIEW_DTYPES)
register_cases("aten.squeeze.default", [Case("all", (T((3, 1, 5, 1)),), compiled=True)], dtypes=VIEW_DTYPES)
register_cases("aten.squeeze.dim", [Case("one", (T((3, 1, 5)), 1), compiled=True), Case("not_one", (T((3, 4)), 0))],
               dtypes=VIEW_DTYPES)
register_cases("aten.squeeze.dims", [Case("some", (T((1, 3, 1, 5)), [0, 2]), compiled=True)], dtypes=VIEW_DTYPES)
register_cases("aten.slice.Tensor", [
    Case("strided", (T((9, 12)), 1, 2, 11, 3), compiled=True),
    Case("clamped_end", (T((9, 12)), 0, 4, 100)),
    Case("transposed", (T((9, 12), "transposed"), 0, 1, 8, 2)),
], dtypes=VIEW_DTYPES)
register_cases("aten.select.int", [
    Case("negative_index", (T((4, 6)), 1, -2), compiled=True),
    Case("first_axis", (T((3, 4, 5)), 0, 2)),
], dtypes=VIEW_DTYPES)
register_cases("aten.repeat.default", [
    Case("new_axis", (T((3, 4)), [2, 1, 3]), compiled=True),
    Case("sliced", (T((3, 4), "sliced"), [2, 2])),
], dtypes=VIEW_DTYPES)


def reduction_cases(dims: bool = True, values: str = "any") -> list[Case]:
    if not dims:
        return [Case("ragged", (T((17, 33), values=values),), compiled=True),
                Case("transposed", (T((9, 12), "transposed", values),)),
                Case("scalar", (T((), values=values),))]
    return [
        Case("rows", (T((17, 33), values=values), [1]), compiled=True),
        Case("keepdim", (T((6, 37), values=values), [1], True)),
        Case("several_axes", (T((5, 3, 29), values=values), [0, 2])),
        Case("every_axis", (T((4, 9), values=values), [])),
        Case("transposed", (T((9, 12), "transposed", values), [0])),
        Case("size_one", (T((7, 1), values=values), [-1])),
    ]


register_cases("aten.sum.dim_IntList", reduction_cases(), dtypes=NUMBERS)
register_cases("aten.sum.default", reduction_cases(dims=False), dtypes=NUMBERS)
register_cases("aten.mean.dim", reduction_cases())
register_cases("aten.mean.default", reduction_cases(dims=False))
register_cases("aten.prod.dim_int", [
    Case("rows", (T((5, 9), values="unit"), 1), compiled=True),
    Case("keepdim", (T((5, 9), "transposed", "unit"), 0, True)),
], dtypes=NUMBERS)
register_cases("aten.prod.default", [Case("small", (T((2, 3), values="unit"),), compiled=True)], dtypes=NUMBERS)
register_cases("aten.amax.default", reduction_cases(), dtypes=NUMBERS)
register_cases("aten.amin.default", reduction_cases(), dtypes=NUMBERS)
register_cases("aten.max.default", reduction_cases(dims=False), dtypes=NUMBERS)
register_cases("aten.min.default", reduction_cases(dims=False), dtypes=NUMBERS)

def extreme_with_index_cases() -> list[Case]:
    """``max.dim`` / ``min.dim``: ``halves`` (and small integers) repeat within a row, so
    that the index must be the first one holding the extreme value."""
    return [
        Case("rows", (T((17, 33), values="halves"), 1), compiled=True),
        Case("keepdim", (T((6, 37), values="halves"), 1, True)),
        Case("negative_dim", (T((5, 3, 29), values="halves"), -2)),
        Case("transposed", (T((9, 12), "transposed", "halves"), 0)),
        Case("sliced_keepdim", (T((4, 7), "sliced", "halves"), -1, True)),
        Case("size_one", (T((7, 1)), -1)),
        Case("scalar", (T(()), 0)),
    ]


def argument_index_cases() -> list[Case]:
    """``argmax`` / ``argmin``: along one axis, or over the flattened tensor (``dim=None``)."""
    return [
        Case("rows", (T((17, 33), values="halves"), -1), compiled=True),
        Case("flattened", (T((17, 33), values="halves"),), compiled=True),
        Case("flattened_keepdim", (T((4, 9), values="halves"), None, True)),
        Case("keepdim", (T((5, 3, 29), values="halves"), 1, True)),
        Case("transposed", (T((9, 12), "transposed", "halves"), 0)),
        Case("size_one", (T((7, 1)), 1)),
        Case("scalar", (T(()),)),
    ]


for name in ("max", "min"):
    register_cases(f"aten.{name}.dim", extreme_with_index_cases(), dtypes=NUMBERS + ("b8",))
    register_cases(f"aten.arg{name}.default", argument_index_cases(), dtypes=NUMBERS)

register_cases("aten.var.correction", [
    Case("rows", (T((17, 33)), [1]), {"correction": 1}, compiled=True),
    Case("keepdim_population", (T((5, 3, 29)), [0, 2]), {"correction": 0, "keepdim": True}),
], dtypes=("f64", "f32"))
register_cases("aten.var_mean.correction", [
    Case("rows", (T((17, 33)), [1]), {"correction": 1}, compiled=True),
    Case("keepdim", (T((6, 37), "transposed"), [-1]), {"correction": 1, "keepdim": True}),
], dtypes=("f64", "f32"))

register_cases("aten.clone.default", unary_cases(), dtypes=VIEW_DTYPES)
register_cases("aten.alias.default", unary_cases()[:2], dtypes=VIEW_DTYPES)
register_cases("aten.detach.default", unary_cases()[:2], dtypes=VIEW_DTYPES)
register_cases("aten._to_copy.default", [
    Case("to_half", (T((17, 33)),), {"dtype": torch.float16}, compiled=True),
    Case("to_int", (T((6, 7)),), {"dtype": torch.int32}),
    Case("same", (T((6, 7), "sliced"),)),
], dtypes=("f32", "f64", "i64"))
register_cases("aten.full.default", [Case("float", ([3, 4], 2.5), compiled=True), Case("int", ([5], 7))], dtypes=("f32",))
register_cases("aten.full_like.default", [Case("ragged", (T((17, 33)), 1.5), compiled=True)], dtypes=NUMBERS)
register_cases("aten.scalar_tensor.default", [Case("number", (2.5,))], dtypes=("f32",))

LOGICAL_DTYPES = ("b8", "f32", "i64")
for name, values in (("all", "any"), ("any", "any")):
    register_cases(f"aten.{name}.default", [Case("ragged", (T((17, 33)),), compiled=True), Case("scalar", (T(()),))],
                   dtypes=LOGICAL_DTYPES)
    register_cases(f"aten.{name}.dim", [Case("rows", (T((17, 33)), 1), compiled=True),
                                        Case("keepdim", (T((6, 7), "transposed"), 0, True))], dtypes=LOGICAL_DTYPES)
register_cases("aten.any.dims", [Case("two_axes", (T((5, 3, 29)), [0, 2]), compiled=True)], dtypes=LOGICAL_DTYPES)

register_cases("aten.arange.default", [Case("integers", (17,), compiled=True)], dtypes=("i64",))
register_cases("aten.arange.start", [Case("integers", (3, 20))], dtypes=("i64",))
register_cases("aten.arange.start_step", [Case("floats", (0.5, 9.0, 0.75), compiled=True)], dtypes=("f32",))

BITWISE_DTYPES = ("b8", "i32", "i64")
for name in ("bitwise_and", "bitwise_or"):
    register_cases(f"aten.{name}.Tensor", [Case("broadcast", (T((4, 1, 33)), T((5, 1))), compiled=True)],
                   dtypes=BITWISE_DTYPES)
    register_cases(f"aten.{name}.Scalar", [Case("number", (T((17, 33)), True))], dtypes=("b8",))
register_cases("aten.bitwise_not.default", unary_cases()[:3], dtypes=BITWISE_DTYPES)
for name in ("logical_and", "logical_or"):
    register_cases(f"aten.{name}.default", [Case("broadcast", (T((4, 1, 33)), T((5, 1))), compiled=True)],
                   dtypes=LOGICAL_DTYPES)
register_cases("aten.logical_not.default", unary_cases()[:3], dtypes=LOGICAL_DTYPES)

register_cases("aten.cat.default", [
    Case("rows", ([T((5, 33)), T((12, 33))], 0), compiled=True),
    Case("columns_transposed", ([T((9, 4), "transposed"), T((9, 7))], -1)),
    Case("three", ([T((2, 3)), T((2, 1)), T((2, 5))], 1)),
], dtypes=VIEW_DTYPES)
register_cases("aten.stack.default", [
    Case("new_axis", ([T((5, 7)), T((5, 7)), T((5, 7))], 1), compiled=True),
    Case("first", ([T((4,)), T((4,), "sliced")],)),
], dtypes=VIEW_DTYPES)
register_cases("aten.cumsum.default", [
    Case("rows", (T((17, 33)), 1), compiled=True),
    Case("first_axis", (T((9, 12), "transposed"), 0)),
], dtypes=("f64", "f32", "i64"))

register_cases("aten.embedding.default", [
    Case("lookup", (T((50, 8)), T((4, 7), values="index", dtype="i64")), compiled=True),
], dtypes=("f32", "f16"))
register_cases("aten.index_select.default", [
    Case("rows", (T((10, 6)), 0, T((5,), values="index", dtype="i64")), compiled=True),
    Case("columns", (T((10, 6)), 1, T((3,), values="index", dtype="i64"))),
], dtypes=VIEW_DTYPES)
register_cases("aten.index_put.default", [
    Case("cache_positions", (T((2, 3, 11, 5)), [None, None, T((4,), values="index", dtype="i64")], T((2, 3, 4, 5))),
         compiled=True),
    Case("broadcast_values", (T((10, 6)), [T((3,), values="index", dtype="i64")], T((6,)))),
    Case("accumulated", (T((10, 6)), [T((7,), values="index", dtype="i64")], T((7, 6)), True), compiled=True,
         dtypes=("f32", "f64")),
], dtypes=VIEW_DTYPES)
register_cases("aten.index.Tensor", [
    Case("first_axis", (T((10, 6)), [T((5,), values="index", dtype="i64")]), compiled=True),
], dtypes=VIEW_DTYPES)

register_cases("aten.masked_fill.Scalar", [
    Case("broadcast_mask", (T((17, 33)), T((33,), dtype="b8"), -1.5), compiled=True),
], dtypes=FLOAT_DTYPES)
register_cases("aten.masked_fill.Tensor", [Case("zero_d_value", (T((6, 7)), T((6, 7), dtype="b8"), T(())))],
               dtypes=FLOAT_DTYPES)
register_cases("aten.tril.default", [Case("square", (T((9, 9)),), compiled=True), Case("wide", (T((2, 5, 8)), 1))],
               dtypes=NUMBERS)
register_cases("aten.triu.default", [Case("square", (T((9, 9)),), compiled=True), Case("tall", (T((8, 5)), -1))],
               dtypes=NUMBERS)

register_cases("aten.lift_fresh_copy.default", unary_cases()[:2], dtypes=VIEW_DTYPES)
register_cases("aten.new_full.default", [Case("float", (T((3, 4)), [5, 6], 2.5), compiled=True)], dtypes=NUMBERS)
register_cases("aten.new_ones.default", [Case("shape", (T((3, 4)), [5, 6]))], dtypes=NUMBERS)
register_cases("aten.new_zeros.default", [Case("shape", (T((3, 4)), [7]))], dtypes=NUMBERS)
register_cases("aten.ones.default", [Case("shape", ([3, 4],), compiled=True)], dtypes=("f32",))
register_cases("aten.zeros.default", [Case("shape", ([3, 4],))], dtypes=("f32",))
register_cases("aten.ones_like.default", [Case("ragged", (T((17, 33)),))], dtypes=NUMBERS)
register_cases("aten.zeros_like.default", [Case("ragged", (T((17, 33)),))], dtypes=NUMBERS)

register_cases("aten.rms_norm.default", [
    Case("weight", (T((17, 33)), [33], T((33,))), {"eps": 1e-6}, compiled=True),
    Case("no_weight", (T((2, 5, 24)), [24])),
])
register_cases("aten.scaled_dot_product_attention.default", [
    Case("cross", (T((2, 3, 17, 8)), T((2, 3, 19, 8)), T((2, 3, 19, 8))), compiled=True),
    Case("causal", (T((1, 2, 9, 16)), T((1, 2, 9, 16)), T((1, 2, 9, 16))), {"is_causal": True}),
], dtypes=("f32", "f16", "bf16"))

from lamina.testing.cases import attention_ops, image_ops, integer_ops, model_ops  # noqa: E402,F401 - their cases register on import

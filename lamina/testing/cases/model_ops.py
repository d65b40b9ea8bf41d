"""Cases for LayerNorm, splits into views, and ``gather``: what GPT-2, BERT and Phi-3 need."""

from __future__ import annotations

from lamina.testing.cases.database import register_cases
from lamina.testing.cases.samples import Case, T

VIEW_DTYPES = ("f32", "f16", "bf16", "i64")

register_cases("aten.native_layer_norm.default", [
    Case("weight_and_bias", (T((17, 33)), [33], T((33,)), T((33,)), 1e-5), compiled=True),
    Case("two_axes", (T((2, 5, 6, 4)), [6, 4], T((6, 4)), None, 1e-6)),
    Case("no_affine", (T((9, 12), "transposed"), [12], None, None, 1e-5)),
    Case("size_one", (T((3, 1)), [1], T((1,)), T((1,)), 1e-5)),
], dtypes=("f64", "f32", "f16", "bf16"), tolerance={"f16": 2e-2, "bf16": 2e-2})
register_cases("aten.split_with_sizes.default", [
    Case("fused_projection", (T((3, 13, 48)), [16, 16, 16], -1), compiled=True),
    Case("uneven", (T((17, 9), "transposed"), [4, 0, 13])),
], dtypes=VIEW_DTYPES)
register_cases("aten.split.Tensor", [
    Case("ragged_last", (T((17, 33)), 8, 1), compiled=True),
    Case("one_piece", (T((5, 3), "sliced"), 7)),
], dtypes=VIEW_DTYPES)
register_cases("aten.unbind.int", [
    Case("heads", (T((3, 4, 5)), 1), compiled=True),
    Case("first_axis", (T((2, 7), "transposed"),)),
], dtypes=VIEW_DTYPES)
register_cases("aten.gather.default", [
    Case("rows", (T((9, 12)), 1, T((9, 5), values="index", dtype="i64")), compiled=True),
    Case("first_axis_smaller_index", (T((6, 7)), 0, T((4, 3), values="index", dtype="i64"))),
    Case("transposed", (T((9, 12), "transposed"), -1, T((9, 9), values="index", dtype="i64"))),
], dtypes=VIEW_DTYPES)

"""Cases for padding, convolution, batch norm and pooling.

Images are 13 pixels a side (or 11, 12, 14: a multiple of no tile, odd or even against
a stride of 2), channel counts are odd, and every op also reads inputs through
transposed and sliced views. Integer max pooling holds many equal values, which checks
that the indices name the first maximum of each window, as PyTorch's do.
"""

from __future__ import annotations

from lamina.testing.capabilities import FLOAT_DTYPES
from lamina.testing.cases.database import register_cases
from lamina.testing.cases.samples import Case, T

HALF_AND_UP = ("f64", "f32", "f16", "bf16")
PAD_DTYPES = FLOAT_DTYPES + ("i32", "i64", "b8")

register_cases("aten.constant_pad_nd.default", [
    Case("grow", (T((2, 3, 13, 13)), [1, 2, 3, 1]), compiled=True),
    Case("value", (T((5, 7)), [2, 1], 1.5)),
    Case("crop_and_grow", (T((4, 9, 13)), [-1, -2, 1, 0, 0, 2], -2.0)),
    Case("leading_axis", (T((3, 5)), [0, 0, 1, 1], 3)),
    Case("transposed", (T((9, 12), "transposed"), [1, 1, 2, 0])),
    Case("sliced", (T((4, 7), "sliced"), [0, 3])),
    Case("size_one", (T((1, 5, 1)), [1, 1, 0, 0, 2, 0])),
], dtypes=PAD_DTYPES)


def _conv(x: T, weight: T, bias: T | None, stride, padding, dilation, groups=1) -> tuple:
    """``aten.convolution``'s arguments, not transposed."""
    return (x, weight, bias, stride, padding, dilation, False, [0] * len(stride), groups)


register_cases("aten.convolution.default", [
    Case("ragged", _conv(T((2, 3, 13, 13)), T((8, 3, 3, 3)), T((8,)), [1, 1], [1, 1], [1, 1]), compiled=True),
    Case("strided_dilated", _conv(T((2, 5, 13, 11)), T((7, 5, 3, 2)), None, [2, 1], [1, 0], [1, 2])),
    Case("one_d", _conv(T((2, 4, 17)), T((6, 4, 3)), T((6,)), [2], [2], [2])),
    Case("three_d", _conv(T((1, 2, 5, 6, 7)), T((3, 2, 3, 3, 3)), T((3,)), [1, 1, 1], [1, 0, 1], [1, 1, 1])),
    Case("groups", _conv(T((2, 6, 13, 13)), T((9, 2, 3, 3)), T((9,)), [1, 1], [1, 1], [1, 1], 3)),
    Case("depthwise", _conv(T((2, 6, 13, 13)), T((6, 1, 3, 3)), None, [2, 2], [1, 1], [1, 1], 6)),
    Case("patch_embedding", _conv(T((1, 3, 16, 16)), T((32, 3, 4, 4)), T((32,)), [4, 4], [0, 0], [1, 1])),
    Case("pointwise", _conv(T((2, 16, 7, 5)), T((5, 16, 1, 1)), T((5,)), [1, 1], [0, 0], [1, 1])),
    Case("transposed_input", _conv(T((2, 3, 9, 12), "transposed"), T((4, 3, 3, 3)), T((4,)), [1, 1], [1, 1], [1, 1])),
    Case("sliced_weight", _conv(T((2, 3, 9, 12)), T((4, 3, 3, 3), "sliced"), T((4,), "sliced"), [1, 2], [0, 1],
                                [1, 1])),
], dtypes=HALF_AND_UP)


def _batch_norm(x: T, channels: int, affine: bool = True, eps: float = 1e-5, stats: str = "contiguous") -> tuple:
    """``_native_batch_norm_legit_no_training``'s arguments; the variance is positive, as running ones are."""
    weight, bias = (T((channels,)), T((channels,))) if affine else (None, None)
    return (x, weight, bias, T((channels,), stats), T((channels,), stats, "positive"), 0.1, eps)


register_cases("aten._native_batch_norm_legit_no_training.default", [
    Case("image", _batch_norm(T((2, 5, 13, 13)), 5), compiled=True),
    Case("no_affine", _batch_norm(T((3, 4, 7)), 4, affine=False, eps=1e-3)),
    Case("features", _batch_norm(T((6, 5)), 5)),
    Case("transposed", _batch_norm(T((2, 3, 9, 12), "transposed"), 3)),
    Case("sliced_stats", _batch_norm(T((2, 5, 4, 3)), 5, stats="sliced")),
], dtypes=HALF_AND_UP)

register_cases("aten.max_pool2d_with_indices.default", [
    Case("ceil_mode", (T((2, 3, 13, 13)), [2, 2], [2, 2], [0, 0], [1, 1], True), compiled=True),
    Case("padded", (T((2, 3, 13, 13)), [3, 3], [2, 2], [1, 1])),
    Case("dilated", (T((1, 2, 13, 12)), [3, 2], [2, 1], [1, 1], [2, 1], True)),
    Case("unbatched", (T((3, 9, 11)), [2, 2])),
    Case("overlapping", (T((2, 3, 9, 12), "transposed"), [3, 3], [1, 1])),
    Case("sliced", (T((2, 3, 9, 8), "sliced"), [2, 3], [1, 2], [1, 1])),
], dtypes=FLOAT_DTYPES + ("i32", "i64"))

register_cases("aten.avg_pool2d.default", [
    Case("padded", (T((2, 3, 13, 13)), [3, 3], [2, 2], [1, 1]), compiled=True),
    Case("ceil_exclude_pad", (T((2, 3, 14, 13)), [3, 3], [2, 2], [1, 1], True, False)),
    Case("ceil_include_pad", (T((2, 3, 14, 13)), [3, 3], [2, 2], [1, 1], True, True)),
    Case("divisor_override", (T((3, 9, 11)), [2, 3], [2, 2], [0, 1], False, True, 5)),
    Case("transposed", (T((2, 3, 9, 12), "transposed"), [2, 2])),
    Case("sliced", (T((2, 3, 9, 8), "sliced"), [3, 2], [1, 1], [1, 0], True, False)),
], dtypes=HALF_AND_UP)

register_cases("aten._adaptive_avg_pool2d.default", [
    Case("uneven", (T((2, 3, 13, 13)), [3, 3]), compiled=True),
    Case("global", (T((2, 5, 13, 11)), [1, 1])),
    Case("rectangular", (T((2, 3, 13, 12)), [5, 4])),
    Case("more_outputs_than_inputs", (T((3, 5, 6)), [7, 3])),
    Case("even", (T((2, 3, 12, 12)), [4, 4])),
    Case("transposed", (T((2, 3, 9, 12), "transposed"), [4, 5])),
    Case("sliced", (T((2, 3, 9, 8), "sliced"), [2, 3])),
], dtypes=HALF_AND_UP)

"""lamina's conformance kit on this plugin: every op, every sample, every float dtype."""

from lamina.testing import Case, OpCases, OpPluginSuite, T

import lamina_extra_ops.plugin

FLOATS = ("f32", "f16", "bf16", "f64")


def unary(values: str = "any") -> list[Case]:
    return [
        Case("ragged", (T((17, 33), values=values),), compiled=True),
        Case("size_one", (T((1, 5, 1), values=values),)),
        Case("scalar", (T((), values=values),)),
        Case("transposed", (T((9, 12), "transposed", values),)),
        Case("sliced", (T((4, 7), "sliced", values),)),
    ]


class TestExtraOps(OpPluginSuite):
    plugin = lamina_extra_ops.plugin
    cases = {
        "aten.logaddexp.default": OpCases("aten.logaddexp.default", [
            Case("same_shape", (T((17, 33)), T((17, 33))), compiled=True),
            Case("broadcast", (T((4, 1, 33)), T((5, 1)))),
            Case("zero_d_operand", (T((6, 7)), T(()))),
            Case("transposed", (T((9, 12), "transposed"), T((9, 12), "sliced"))),
        ], dtypes=FLOATS),
        "aten.log1p.default": OpCases("aten.log1p.default", unary("unit") + [Case("positive", (T((40,), values="positive"),))],
                                      dtypes=FLOATS),
        "aten.softplus.default": OpCases("aten.softplus.default", unary() + [
            Case("beta_threshold", (T((17, 33)), 2.0, 1.5), compiled=True),
        ], dtypes=FLOATS),
        "aten.mish.default": OpCases("aten.mish.default", unary(), dtypes=FLOATS),
        "aten.hardswish.default": OpCases("aten.hardswish.default", unary(), dtypes=FLOATS),
    }

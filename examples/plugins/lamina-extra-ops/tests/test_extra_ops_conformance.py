"""lamina's conformance kit on this plugin: every op, every sample, every float dtype."""

from lamina.testing import Case, OpCases, OpPluginSuite, T, unary_cases

import lamina_extra_ops.plugin

FLOATS = ("f32", "f16", "bf16", "f64")


class TestExtraOps(OpPluginSuite):
    plugin = lamina_extra_ops.plugin
    cases = {
        "aten.logaddexp.default": OpCases("aten.logaddexp.default", [
            Case("same_shape", (T((17, 33)), T((17, 33))), compiled=True),
            Case("broadcast", (T((4, 1, 33)), T((5, 1)))),
            Case("zero_d_operand", (T((6, 7)), T(()))),
            Case("transposed", (T((9, 12), "transposed"), T((9, 12), "sliced"))),
        ], dtypes=FLOATS),
        "aten.log1p.default": OpCases("aten.log1p.default", unary_cases("unit") + [Case("positive", (T((40,), values="positive"),))],
                                      dtypes=FLOATS),
        "aten.softplus.default": OpCases("aten.softplus.default", unary_cases() + [
            Case("beta_threshold", (T((17, 33)), 2.0, 1.5), compiled=True),
        ], dtypes=FLOATS),
        "aten.mish.default": OpCases("aten.mish.default", unary_cases(), dtypes=FLOATS),
        "aten.hardswish.default": OpCases("aten.hardswish.default", unary_cases(), dtypes=FLOATS),
    }

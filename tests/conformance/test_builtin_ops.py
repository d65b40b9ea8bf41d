"""lamina's own decompositions, checked by the conformance kit like any op plugin."""

from lamina.plugins.ops import plugin
from lamina.testing import Capabilities, OpPluginSuite
from lamina.testing.capabilities import ALL_DTYPES

BITWISE_ON_INTEGERS = [
    *(f"op=aten.{op}.Tensor|dtype={dtype}|case=broadcast" for op in ("bitwise_and", "bitwise_or") for dtype in ("i32", "i64")),
    *(f"op=aten.bitwise_not.default|dtype={dtype}|case={case}" for dtype in ("i32", "i64")
      for case in ("ragged", "size_one", "scalar")),
]
"""lamina's bitwise ops take booleans only (the scalar ops ``and``/``or``/``not`` are logical)."""


class TestBuiltinOps(OpPluginSuite):
    plugin = plugin
    capabilities = Capabilities(dtypes=ALL_DTYPES)
    known_failures = BITWISE_ON_INTEGERS

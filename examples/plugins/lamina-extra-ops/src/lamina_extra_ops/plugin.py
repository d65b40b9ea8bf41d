"""The object registered under the ``lamina.plugins`` entry point ``extra_ops``."""

from __future__ import annotations

from lamina.core.hookspecs import hookimpl

from lamina_extra_ops.decompositions import DECOMPOSITIONS

lamina_requires = ">=0.1"
"""The lamina versions whose hook specs this plugin was written against."""

lamina_capabilities = {"dtypes": ("f32", "f16", "bf16", "f64")}
"""What lamina's conformance kit checks: these ops in every floating-point dtype."""

KEEP = ("aten.logaddexp.default", "aten.softplus.default", "aten.mish.default", "aten.hardswish.default")
"""Ops that PyTorch's core ATen decomposition would otherwise break up before lamina sees them.

Add them to ``keep`` in ``[tool.lamina]`` to have each arrive whole and become one
Elementwise. Without that, ``logaddexp``, ``mish`` and ``softplus`` still compile:
they arrive as built-in arithmetic and ``log1p``, which is here; ``hardswish``
arrives as built-in arithmetic only.
"""


@hookimpl
def lamina_register_ops(register):
    for op, decomposition in DECOMPOSITIONS.items():
        register(op, decomposition)

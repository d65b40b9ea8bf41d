"""Registers the built-in Kernel IR passes."""

from lamina.core.hookspecs import hookimpl
from lamina.plugins.kernel_passes.overlap_with_previous_kernel import OverlapWithPreviousKernel


@hookimpl
def lamina_register_kernel_passes(register):
    register(OverlapWithPreviousKernel())
